"""A Slurm runner's multi-node job is one node to the controller: its node count comes from
the stored spec, and `logs --node K` picks node K's lines by their `[node K] ` tag."""

import json

from lanpool.app.store import Store, migrations
from lanpool.app.store.slurm_nodes import by_node, slurm_nodes


def _spec(nodes: int, resources: object) -> str:
    return json.dumps({"nodes": nodes, "resources": resources})


def test_only_a_job_one_slurm_runner_runs_whole_has_slurm_nodes():
    assert slurm_nodes(_spec(1, {"nodes": 2, "cpu": 1})) == 2
    assert slurm_nodes(_spec(2, {})) == 0  # a LAN gang: one runner per node
    assert slurm_nodes(_spec(1, {})) == 0 and slurm_nodes(_spec(1, {"nodes": 1})) == 0
    for bad in (None, "", "not json", "[]", _spec(1, "x"), _spec(1, {"nodes": "2"}), _spec(1, {"nodes": True})):
        assert slurm_nodes(bad) == 0, bad


def _rows(*chunks: tuple[int, str, bytes]) -> list[tuple]:
    return [("j", 0, seq, data.count(b"\n"), stream, data, 1.5) for seq, stream, data in chunks]


def test_each_line_goes_to_its_tagged_node_untagged_ones_to_node_0():
    rows = by_node(
        _rows(
            (0, "sys", b"lanpool: Slurm job 7 submitted\n"),
            (1, "out", b"[node 0] a\n[node 1] b\n[node 1] c\n[node 0] d\n"),
            (5, "err", b"srun: error: n2: task 0: Exited with exit code 7\n[node 1] boom\n"),
        ),
        2,
    )
    assert rows == [
        ("j", 0, 0, 1, "sys", b"lanpool: Slurm job 7 submitted\n", 1.5),
        ("j", 0, 1, 1, "out", b"a\n", 1.5),
        ("j", 1, 2, 2, "out", b"b\nc\n", 1.5),
        ("j", 0, 4, 1, "out", b"d\n", 1.5),
        ("j", 0, 5, 1, "err", b"srun: error: n2: task 0: Exited with exit code 7\n", 1.5),
        ("j", 1, 6, 1, "err", b"boom\n", 1.5),
    ]


def test_a_forged_or_out_of_range_tag_does_not_move_a_line():
    # node 0 printing "[node 1] ..." is tagged "[node 0] [node 1] ...": still node 0's, its text kept
    rows = by_node(_rows((0, "out", b"[node 0] [node 1] forged\n[node 10] past\n[node -1] x\n[node 1]no space\n")), 2)
    assert rows == [("j", 0, 0, 4, "out", b"[node 1] forged\n[node 10] past\n[node -1] x\n[node 1]no space\n", 1.5)]


def test_metrics_are_node_0s_data_untouched():
    rows = _rows((3, "met", b'{"name": "[node 1] loss"}\n'))
    assert by_node(rows, 2) == rows


def test_a_slurm_job_stored_before_gets_its_nodes_and_each_line_its_node(tmp_path, monkeypatch):
    """Migration 12: a Slurm runner's 2-node job stored with one node row and its lines tagged in
    node 0's log reads as any gang after it; other jobs are untouched."""
    path = tmp_path / "lanpool.db"
    runner = {"name": "slurm-box", "host": "10.0.0.9", "port": 7422}
    with monkeypatch.context() as m:
        m.setattr(migrations, "MIGRATIONS", migrations.MIGRATIONS[:11])
        old = Store(path)
        old.create_run("old-run-1", "train", "/p")
        old.create_job("sj", "old-run-1", "train", runner, {"nodes": 1, "resources": {"nodes": 2}})
        old.create_job("lan", "old-run-1", "train", runner, {"nodes": 1, "resources": {}})
        for job_id in ("sj", "lan"):
            old.set_node(job_id, 0, runner, "DONE", 0, "")
        tagged = b"[node 0] a\n[node 1] b\n"
        old.add_log_chunks([(j, 0, 0, 1, "sys", b"lanpool: Slurm job 7\n", 1.0) for j in ("sj", "lan")])
        old.add_log_chunks([(j, 0, 1, 2, "out", tagged, 2.0) for j in ("sj", "lan")])
        old.close()
    store = Store(path)
    try:
        assert [(n["node"], n["runner"], n["status"]) for n in store.nodes("sj")] == [
            (0, "slurm-box", "DONE"),
            (1, "slurm-box", "DONE"),
        ]
        assert list(store.log_chunks("sj")) == [
            (0, 0, "sys", b"lanpool: Slurm job 7\n"),
            (0, 1, "out", b"a\n"),
            (1, 2, "out", b"b\n"),
        ]
        assert len(store.nodes("lan")) == 1 and list(store.log_chunks("lan"))[-1] == (0, 1, "out", tagged)
    finally:
        store.close()
