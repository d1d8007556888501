"""A process job's env after the first of its interpreter is written without `python -m venv`
(agent/python/venv.py): the same env at its own path, made without a subprocess, and nothing
a job does to its env reaches the next job's.
The in-process part (unit); the rest: tests/integration/test_job_venv.py."""

import lanpool.agent.executors  # noqa: F401 - first: agent.python.job_envs and the executors import each other
from lanpool.agent.python.venv import VenvShape


def test_an_env_holding_anything_but_dirs_links_and_small_files_is_not_copied(tmp_path):
    env = tmp_path / "env"
    (env / "bin").mkdir(parents=True)
    (env / "pyvenv.cfg").write_text("home = /usr/bin\n")
    assert VenvShape.read(env) is not None
    (env / "big").write_bytes(b"x" * (2 * 1024 * 1024))
    assert VenvShape.read(env) is None  # more than venv writes: each env from venv again
