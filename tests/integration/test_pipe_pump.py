"""A process job's pipes (agent/executors/pipe_pump.py, line_cutter.py): every byte delivered once as whole
lines, in few large reads, with a runaway line cut and its memory bounded, through real pipes and a real agent.
The part with real agents and the CLI (integration); the rest: tests/unit/test_pipe_pump.py."""

from lanpool.agent.executors.line_cutter import MAX_LINE


def test_a_process_job_delivers_every_line_once_through_a_real_agent(agent):
    """A job printing 200,000 lines as fast as Python can, a 100 KB line on stderr, then one more line."""
    from tests.system.test_docker_executor import run

    # In the job's env, not a file: a sandboxed job sees no path outside its workspace but the system's.
    flood = (
        "import sys\nw = sys.stdout.write\n[w(f'{i:09d}\\n') for i in range(200000)]\nsys.stdout.flush()\n"
        "sys.stderr.write('e' * 100000 + '\\n')\nsys.stderr.flush()\nprint('the end')\n"
    )
    chunks, status = run(agent, "pp1", ['python -c "$FLOOD"'], "", env={"FLOOD": flood})
    assert status.state == "DONE", status
    out = b"".join(c.data for c in chunks if c.stream == "out").decode().splitlines()
    assert out == [f"{i:09d}" for i in range(200000)] + ["the end"]
    err = [c.data for c in chunks if c.stream == "err"]
    assert b"".join(err).replace(b"\n", b"") == b"e" * 100000
    assert max(len(line) for line in b"".join(err).splitlines()) <= MAX_LINE
    seqs = sorted(c.seq for c in chunks)
    assert len(set(seqs)) == len(seqs)  # no chunk twice
