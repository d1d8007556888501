"""Each process job in its own Python environment: layered on the runner's base
interpreter, requirements installed into a cached layer with pip's output in the job's log,
`version:` matched to an interpreter of the runner or refused at submit, and the agent's
own environment never written by a job. Offline: the packages are wheels made here.
The in-process part (unit); the rest: tests/integration/test_job_python_env.py."""

from pathlib import Path

import pytest

from lanpool.protocol import ProtocolError, SubmitJob, decode_client_message, encode_message


def test_python_and_requirements_fields_are_bounded():
    ok = SubmitJob("j1", "r", "w", ["true"], python="3.10", requirements="req/requirements.txt")
    assert decode_client_message(encode_message(ok)[4:]) == ok
    for bad in ({"python": "3.10; rm -rf /"}, {"python": "3" * 40}, {"requirements": "a\nb"}):
        with pytest.raises(ProtocolError):
            decode_client_message(encode_message(SubmitJob("j1", "r", "w", ["true"], **bad))[4:])


def test_container_jobs_install_requirements_first_in_their_log():
    from lanpool.agent.jobs.env import container_commands

    req = SubmitJob("j1", "r", "w", ["python main.py"], requirements="my reqs.txt", python="3.10")
    assert container_commands(req) == [
        "pip install --disable-pip-version-check --no-input -r 'my reqs.txt'",
        "python main.py",
    ]
    assert container_commands(SubmitJob("j1", "r", "w", ["true"])) == ["true"]


def test_the_base_pins_keep_the_constraints_pip_already_had(tmp_path: Path, monkeypatch):
    from lanpool.agent.python.job_envs import constraints_text

    site, env_file = tmp_path / "site.txt", tmp_path / "env.txt"
    site.write_text("numpy<3\n")
    env_file.write_text("scipy<2\n")
    (tmp_path / "pip.conf").write_text(f"[global]\nconstraint = {site} {tmp_path / 'gone.txt'}\n")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(tmp_path / "pip.conf"))
    monkeypatch.setenv("PIP_CONSTRAINT", str(env_file))
    text = constraints_text(["torch==2.5.1"])
    assert f"-c {site}\n" in text and f"-c {env_file}\n" in text and text.endswith("torch==2.5.1\n"), text
    assert "gone.txt" not in text  # a file that is not there would fail every pip install
