"""A process job's env after the first of its interpreter is written without `python -m venv`
(agent/python/venv.py): the same env at its own path, made without a subprocess, and nothing
a job does to its env reaches the next job's.
The part with real agents and the CLI (integration); the rest: tests/unit/test_job_venv.py."""

import asyncio
import subprocess
from pathlib import Path

import pytest

import lanpool.agent.executors  # noqa: F401 - first: agent.python.job_envs and the executors import each other
import lanpool.agent.python.job_envs as job_python
from lanpool.agent.python.interpreters import Pythons
from lanpool.agent.python.job_envs import JobPythons


def _prepare(pythons: JobPythons, job: Path) -> dict[str, str]:
    workspace = job / "workspace"
    workspace.mkdir(parents=True, exist_ok=True)
    return asyncio.run(pythons.prepare(job / "pyenv", workspace, workspace, "", "", lambda *_a: None))


@pytest.fixture
def venv_runs(monkeypatch) -> list[list[str]]:
    """The `python -m venv` commands the agent ran."""
    runs: list[list[str]] = []
    real = job_python._run

    async def counted(what, argv, *rest):
        if "venv" in argv:
            runs.append(argv)
        return await real(what, argv, *rest)

    monkeypatch.setattr(job_python, "_run", counted)
    return runs


def _python_says(env: dict[str, str], code: str) -> str:
    python = Path(env["VIRTUAL_ENV"]) / "bin" / "python"
    return subprocess.run([python, "-c", code], capture_output=True, text=True, check=True).stdout.strip()


def test_a_second_env_is_written_without_venv_and_is_its_own(tmp_path, venv_runs):
    pythons = JobPythons(Pythons.discover(), None)
    first = _prepare(pythons, tmp_path / "j1")
    second = _prepare(pythons, tmp_path / "j2")
    assert len(venv_runs) == 1  # the first env only
    env2 = Path(second["VIRTUAL_ENV"])
    # Its own prefix, with the base interpreter's packages seen through _lanpool.pth.
    assert _python_says(second, "import sys, msgpack; print(sys.prefix)") == str(env2)
    assert _python_says(first, "import sys; print(sys.prefix)") == first["VIRTUAL_ENV"]
    # Its paths are its own, never the first env's.
    activate = (env2 / "bin" / "activate").read_text()
    assert str(env2) in activate and first["VIRTUAL_ENV"] not in activate
    assert first["VIRTUAL_ENV"] not in (env2 / "pyvenv.cfg").read_text()
    assert (env2 / "bin" / "python").is_symlink() and (env2 / "bin" / "pip").is_file()
    assert "pip" in _python_says(
        second, "import subprocess; print(subprocess.run(['pip', '--version'], capture_output=True, text=True).stdout)"
    )


def test_what_a_job_does_to_its_env_never_reaches_the_next_jobs(tmp_path, venv_runs):
    pythons = JobPythons(Pythons.discover(), None)
    env1 = Path(_prepare(pythons, tmp_path / "j1")["VIRTUAL_ENV"])
    # The first job writes into its own env: a package, a changed script, a link out.
    next((env1 / "lib").glob("python3*/site-packages")).joinpath("planted.py").write_text("print('planted')\n")
    (env1 / "bin" / "activate").write_text("echo pwned\n")
    (env1 / "bin" / "escape").symlink_to("/etc")
    env2 = Path(_prepare(pythons, tmp_path / "j2")["VIRTUAL_ENV"])
    assert not list(env2.rglob("planted.py")) and not (env2 / "bin" / "escape").exists()
    assert "pwned" not in (env2 / "bin" / "activate").read_text()


def test_a_retry_writes_its_env_anew_over_what_the_attempt_before_left(tmp_path, venv_runs):
    """A retried job gets the same env path: what its first attempt left (a link planted where
    venv writes a file) is neither an error (the retry once failed: FileExistsError on lib64)
    nor written through."""
    pythons = JobPythons(Pythons.discover(), None)
    _prepare(pythons, tmp_path / "j1")
    env2 = Path(_prepare(pythons, tmp_path / "j2")["VIRTUAL_ENV"])
    outside = tmp_path / "outside.txt"
    outside.write_text("untouched\n")
    (env2 / "pyvenv.cfg").unlink()
    (env2 / "pyvenv.cfg").symlink_to(outside)
    again = _prepare(pythons, tmp_path / "j2")
    assert again["VIRTUAL_ENV"] == str(env2) and len(venv_runs) == 1
    assert outside.read_text() == "untouched\n" and not (env2 / "pyvenv.cfg").is_symlink()
    assert _python_says(again, "import sys; print(sys.prefix)") == str(env2)
