"""Fair turns between the owners of a shared runner and what a waiting job is told of the
others (agent/jobs/turns.py): pure rules, each with its hostile input. On a real agent with two
controllers: tests/integration/test_team_pool.py."""

import math

from lanpool.agent.jobs.journal import JobRecord
from lanpool.agent.jobs.turns import Holder, InLine, holders_text, queue_rows, take_turns, who


def _line(*jobs: tuple[str, str, int]) -> list[InLine]:
    return [InLine(job_id, owner, seq) for job_id, owner, seq in jobs]


def test_one_owner_keeps_its_own_order_and_a_second_is_at_most_one_round_behind():
    line = _line(("a2", "A", 2), ("a3", "A", 3), ("a4", "A", 4), ("b1", "B", 5))
    assert take_turns(line[:3], {"A": 1}, {"A": 10.0}) == ["a2", "a3", "a4"]  # first come, first served
    # A runs a job and started last: B's one job goes first, then A's in their order.
    assert take_turns(line, {"A": 1}, {"A": 10.0}) == ["b1", "a2", "a3", "a4"]
    # A running nothing and B running one: A's first job, then B's, then A's others.
    assert take_turns(line, {"B": 1}, {"A": 10.0, "B": 20.0}) == ["a2", "b1", "a3", "a4"]


def test_rounds_between_three_owners_ordered_by_running_then_last_start():
    line = _line(("a1", "A", 1), ("a2", "A", 2), ("b1", "B", 3), ("b2", "B", 4), ("c1", "C", 5))
    order = take_turns(line, {}, {"A": 30.0, "B": 20.0})  # C never started: first; then B (longer ago)
    assert order == ["c1", "b1", "a1", "b2", "a2"]
    assert take_turns([], {}, {}) == []


def test_priority_orders_one_owners_jobs_never_another_owners():
    line = [InLine("a1", "A", 1), InLine("a2", "A", 2, priority=5), InLine("b1", "B", 3, priority=-5)]
    assert take_turns(line, {}, {"A": 1.0, "B": 2.0}) == ["a2", "b1", "a1"]  # A's round 1 is its high one


def test_a_thousand_jobs_of_ten_owners_alternate():
    line = [InLine(f"j{k}", f"o{k // 100}", k) for k in range(1000)]  # each owner queued 100 in a row
    order = take_turns(line, {}, {})
    assert order[:10] == [f"j{k * 100}" for k in range(10)]  # the first round: every owner's first job
    assert sorted(order) == sorted(j.job_id for j in line)


def test_holders_are_named_by_label_workflow_resources_and_time_longest_first():
    now = 10_000.0
    held = [
        Holder("bob", "SHA256:bbbb", "eval", 0, 2.0, now - 300),
        Holder("alice", "SHA256:aaaa", "train", 2, 0.0, now - 4320, max_duration_s=4 * 3600),
    ]
    assert holders_text(held, now) == "alice (train, 2 GPU, 1h12m of max_duration 4h00m), bob (eval, 2 CPU, 5m)"
    assert holders_text(held, now, private=True) == "2 jobs"
    assert holders_text([], now) == ""
    many = [Holder(f"u{k}", "", "w", 1, 0, now - k) for k in range(5)]
    assert holders_text(many, now).endswith("and 2 more jobs")


def test_hostile_labels_and_workflows_reach_nobody_as_escapes_or_walls_of_text():
    now = 100.0
    evil = Holder("\x1b[31mmallory\x07" + "x" * 500, "SHA256:" + "m" * 43, "\x1b]0;title\x07w\n" * 50, 1, 0, now)
    text = holders_text([evil], now)
    assert "\x1b" not in text and "\x07" not in text and "\n" not in text
    assert len(text) < 120
    assert who("", "SHA256:abcdefghijk") == "key abcdefgh"  # no label: the start of its key
    assert who("", "") == "a controller"
    assert who("\x00\x01", "SHA256:zz") == "key zz"  # nothing printable: as no label


def test_the_admins_view_lists_running_then_waiting_in_turn_order():
    def record(job_id: str, owner: str, label: str, state: str, seq: int, started: float | None = None):
        return JobRecord(
            job_id,
            "run",
            "train",
            [],
            {},
            [],
            owner=owner,
            owner_label=label,
            state=state,
            queued_seq=seq,
            started_at=started,
            submitted_at=1.0,
            gpu_count=1,
        )

    records = [
        record("a1", "A", "alice", "RUNNING", 1, started=5.0),
        record("a2", "A", "alice", "QUEUED", 2),
        record("a3", "A", "alice", "QUEUED", 3),
        record("b1", "B", "bob", "QUEUED", 4),
        record("old", "B", "bob", "DONE", 0, started=1.0),
    ]
    rows = queue_rows(records, now=100.0)
    assert [(r["job_id"], r["turn"], r["owner"]) for r in rows] == [
        ("a1", None, "alice"),
        ("b1", 1, "bob"),
        ("a2", 2, "alice"),
        ("a3", 3, "alice"),
    ]
    assert rows[0]["gpus"] == 1 and not math.isnan(float(rows[0]["cpus"]))  # type: ignore[arg-type]
