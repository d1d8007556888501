"""A Slurm runner's multi-node job is one node to the controller: its node count comes from
the stored spec, and `logs --node K` picks node K's lines by their `[node K] ` tag."""

import json

from lanpool.app.jobs.slurm import NodeLines, slurm_nodes


def _spec(nodes: int, resources: object) -> str:
    return json.dumps({"nodes": nodes, "resources": resources})


def test_only_a_job_one_slurm_runner_runs_whole_has_slurm_nodes():
    assert slurm_nodes(_spec(1, {"nodes": 2, "cpu": 1})) == 2
    assert slurm_nodes(_spec(2, {})) == 0  # a LAN gang: one runner per node
    assert slurm_nodes(_spec(1, {})) == 0 and slurm_nodes(_spec(1, {"nodes": 1})) == 0
    for bad in (None, "", "not json", "[]", _spec(1, "x"), _spec(1, {"nodes": "2"}), _spec(1, {"nodes": True})):
        assert slurm_nodes(bad) == 0, bad


def _collect():
    got: list[tuple[str, bytes]] = []
    return got, lambda job_id, stream, data: got.append((stream, data))


def test_node_lines_keep_that_nodes_lines_and_the_untagged_ones():
    got, printer = _collect()
    sink = NodeLines(printer, 1)
    sink("j", "out", b"[node 0] a\n[node 1] b\n[node 10] c\n[node 1] [node 0] d\n")
    sink("j", "sys", b"lanpool: Slurm job 7 submitted\n")
    sink("j", "out", b"[node 0] only node 0\n")  # nothing of node 1: nothing printed
    assert got == [("out", b"[node 1] b\n[node 1] [node 0] d\n"), ("sys", b"lanpool: Slurm job 7 submitted\n")]


def test_node_lines_forged_tag_inside_a_line_does_not_move_it():
    # node 0 printing "[node 1] ..." is tagged "[node 0] [node 1] ...": still node 0's
    got, printer = _collect()
    NodeLines(printer, 1)("j", "out", b"[node 0] [node 1] forged\n")
    assert got == []


def test_node_lines_tail_counts_that_nodes_lines_and_stamps_are_skipped():
    got, printer = _collect()
    sink = NodeLines(printer, 0, tail=2, stamped=True)
    stamp = b"2026-01-01 10:00:00.000 "
    for i in range(5):
        sink("j", "out", stamp + f"[node 0] x{i}\n".encode() + stamp + f"[node 1] y{i}\n".encode())
    assert got == []  # held until flush
    sink.flush()
    assert [d for _, d in got] == [stamp + b"[node 0] x3\n", stamp + b"[node 0] x4\n"]
    sink("j", "out", b"-".ljust(23) + b" [node 1] later\n" + b"-".ljust(23) + b" [node 0] later\n")
    assert got[-1] == ("out", b"-".ljust(23) + b" [node 0] later\n")
