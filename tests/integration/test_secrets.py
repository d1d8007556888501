"""Env and secrets: `run --env/--env-file`, `secrets set|list|rm`, `${{ secrets.NAME }}`.

Real CLI, real agent on loopback, real SQLite. The secret's value must reach the
job and nowhere else: not the controller's SQLite (grepped as bytes, WAL included),
not the agent's data dir (journal, spool), not a log in clear.
The part with real agents and the CLI (integration); the rest: tests/unit/test_secrets.py."""

import hashlib
import json
import stat
import subprocess
import time
from datetime import datetime
from pathlib import Path

import pytest

from tests.harness import APP_MODULE, lanpool_env

TOKEN = "tok-7f3a9c1e5b-SECRET"


MULTI = "first-line-QwErTy\nsecond-line-AsDfGh"


WORKFLOWS = """
workflows:
  - name: show
    env:
      TOKEN: ${{ secrets.TOKEN }}
      BEARER: "Bearer ${{ secrets.TOKEN }}"
      MULTI: ${{ secrets.MULTI }}
    commands:
      - echo "token=$TOKEN"
      - echo "$BEARER"
      - echo "$MULTI"
      # The value itself must not be in the workflow (the stored spec would hold it): its digest is.
      - test "$(printf '%s' "$TOKEN" | sha256sum | cut -c1-16)" = "TOKEN_DIGEST" && echo "the job sees the real value"
      - test "$(printf '%s' "$MULTI" | wc -l)" = 1 && echo "multi-line value arrives whole"
  - name: envs
    env:
      A: from-workflow
      B: from-workflow
      C: from-workflow
    commands:
      - echo "A=$A B=$B C=$C D=$D"
""".replace("TOKEN_DIGEST", hashlib.sha256(TOKEN.encode()).hexdigest()[:16])


def _secret_set(home: Path, name: str, value: str, *extra: str) -> subprocess.CompletedProcess:
    """`secrets set NAME` with the value on stdin (a pipe: no prompt)."""
    return subprocess.run(
        [*APP_MODULE, "headless", "secrets", "set", name, *extra],
        input=value,
        env=lanpool_env(home),
        capture_output=True,
        text=True,
        timeout=60,
    )


def _files_holding(root: Path, needle: bytes, skip: tuple[str, ...] = ()) -> list[str]:
    return [
        str(p.relative_to(root))
        for p in root.rglob("*")
        if p.is_file() and p.name not in skip and needle in p.read_bytes()
    ]


def test_set_list_rm_and_file_mode(cli, controller_home):
    res = _secret_set(controller_home, "TOKEN", TOKEN + "\n")
    assert res.returncode == 0, res.stderr
    assert TOKEN not in res.stdout + res.stderr
    path = controller_home / "secrets.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert json.loads(path.read_text()) == {"TOKEN": TOKEN}  # the trailing newline of `echo` is not kept
    assert _secret_set(controller_home, "OTHER", "value-two").returncode == 0

    listing = cli("headless", "secrets", "list", check=True)
    assert listing.stdout.split() == ["OTHER", "TOKEN"] and TOKEN not in listing.stdout
    assert json.loads(cli("headless", "secrets", "list", "--json", check=True).stdout) == ["OTHER", "TOKEN"]

    path.chmod(0o644)  # loosened by hand: tightened again when next read
    cli("headless", "secrets", "list", check=True)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600

    cli("headless", "secrets", "rm", "OTHER", check=True)
    assert json.loads(cli("headless", "secrets", "list", "--json", check=True).stdout) == ["TOKEN"]
    gone = cli("headless", "secrets", "rm", "OTHER")
    assert gone.returncode == 2 and len(gone.stderr.strip().splitlines()) == 1 and "no secret named" in gone.stderr


def test_value_from_file_and_never_from_argv(cli, controller_home, tmp_path):
    value_file = tmp_path / "token.txt"
    value_file.write_text(MULTI + "\n")
    assert _secret_set(controller_home, "MULTI", "", "--from-file", str(value_file)).returncode == 0
    assert json.loads((controller_home / "secrets.json").read_text())["MULTI"] == MULTI
    res = cli("headless", "secrets", "set", "X", "the-value")  # a value on the command line is not taken
    assert res.returncode == 2 and "the-value" not in (controller_home / "secrets.json").read_text()
    short = _secret_set(controller_home, "SHORT", "ab")
    assert short.returncode == 2 and "too short to mask" in short.stderr


@pytest.mark.parametrize("name", ["../evil", "a/b", "x.y", "", "1ABC", "A B"])
def test_secret_name_with_path_characters_is_refused(controller_home, name):
    res = _secret_set(controller_home, name, "some-value")
    assert res.returncode == 2, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and "not valid" in res.stderr
    assert "Traceback" not in res.stderr
    assert not (controller_home.parent / "evil").exists()
    assert not (controller_home / "secrets.json").exists()


def test_job_sees_secret_and_no_clear_value_is_kept(agent, cli, make_project, controller_home):
    project = make_project(WORKFLOWS)
    assert _secret_set(controller_home, "TOKEN", TOKEN).returncode == 0
    assert _secret_set(controller_home, "MULTI", MULTI).returncode == 0

    res = cli("headless", "run", "show", "--runner", agent.address, cwd=project)
    assert res.returncode == 0, res.stderr
    assert "the job sees the real value" in res.stdout and "multi-line value arrives whole" in res.stdout
    printed = res.stdout + res.stderr
    for part in (TOKEN, *MULTI.split("\n")):
        assert part not in printed
    assert "token=***" in res.stdout and "Bearer ***" in res.stdout
    run = next(line for line in res.stderr.splitlines() if line.startswith("run ")).split()[1].rstrip(":")

    logs = cli("headless", "logs", run, check=True).stdout
    assert logs.splitlines()[:4] == ["token=***", "Bearer ***", "***", "***"]
    # A masked line keeps the time the runner gave it: `-t` stamps it, `--since` finds it.
    stamped = cli("headless", "logs", "-t", run, check=True).stdout.splitlines()
    assert stamped[0][:2] == "20" and stamped[0].endswith(" token=***"), stamped[:2]
    assert datetime.fromisoformat(stamped[0][:23]).timestamp() > time.time() - 600
    assert cli("headless", "logs", "--since", "1h", run, check=True).stdout.splitlines()[:4] == logs.splitlines()[:4]

    # The controller's SQLite (WAL and all) and the agent's data dir hold no clear value;
    # only secrets.json does. Each part of the multi-line value is looked for on its own.
    for part in (TOKEN, *MULTI.split("\n")):
        assert _files_holding(controller_home, part.encode(), skip=("secrets.json",)) == []
        assert _files_holding(agent.data_dir, part.encode()) == []
    spec = json.loads(cli("headless", "status", "--json", check=True).stdout)  # the job is known and DONE
    assert spec[0]["jobs"][0]["status"] == "DONE"
    db = b"".join(p.read_bytes() for p in controller_home.glob("lanpool.db*"))
    assert b"${{ secrets.TOKEN }}" in db  # the stored spec keeps the placeholder
    journal = next(agent.data_dir.rglob("job.json")).read_text()
    assert json.loads(journal)["env"]["TOKEN"] == "***"


def test_cache_key_ignores_the_secret_value_but_sees_env(cli, make_project, controller_home):
    project = make_project(WORKFLOWS)
    assert _secret_set(controller_home, "TOKEN", TOKEN).returncode == 0
    assert _secret_set(controller_home, "MULTI", MULTI).returncode == 0

    def key(*args: str) -> str:
        return json.loads(cli("headless", "plan", "--json", *args, "show", cwd=project, check=True).stdout)["jobs"][0][
            "key"
        ]

    before = key()
    assert _secret_set(controller_home, "TOKEN", "another-value-entirely").returncode == 0
    assert key() == before  # a rotated token is the same job: documented in the README
    assert key("--env", "D=1") != before  # --env is an input


def test_unknown_secret_is_one_line_naming_it(cli, make_project, controller_home):
    project = make_project(WORKFLOWS)
    res = cli("headless", "plan", "show", cwd=project)
    assert res.returncode == 2
    assert len(res.stderr.strip().splitlines()) == 1
    assert "'MULTI'" in res.stderr and "secrets set MULTI" in res.stderr


def test_secret_outside_env_is_refused(cli, make_project):
    project = make_project(
        """
        workflows:
          - name: leak
            commands:
              - echo ${{ secrets.TOKEN }}
        """
    )
    res = cli("headless", "plan", "leak", cwd=project)
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1
    assert "secrets are read only in 'env'" in res.stderr


def test_env_file_and_env_override_the_workflow(agent, cli, make_project, tmp_path):
    project = make_project(WORKFLOWS)
    env_file = tmp_path / "run.env"
    env_file.write_text("# comment\n\nexport B=from-file\nC='from file'  \nD=\"quoted # not a comment\" # comment\n")
    res = cli(
        "headless",
        "run",
        "--env-file",
        str(env_file),
        "--env",
        "C=from-cli",
        "--runner",
        agent.address,
        "envs",
        "--env",  # after the workflow name: an option, as no variable is named env
        "A=after-name",
        cwd=project,
    )
    assert res.returncode == 0, res.stderr
    assert "A=after-name B=from-file C=from-cli D=quoted # not a comment" in res.stdout


def test_env_cannot_override_lanpool_names(cli, make_project):
    project = make_project(WORKFLOWS)
    for name in ("LANPOOL_JOB_ID", "MASTER_PORT"):
        res = cli("headless", "plan", "--env", f"{name}=x", "envs", cwd=project)
        assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1
        assert "set by lanpool" in res.stderr and name in res.stderr
    bad = cli("headless", "plan", "--env", "NOEQUALS", "envs", cwd=project)
    assert bad.returncode == 2 and "expected KEY=VALUE" in bad.stderr


def test_bad_env_file_line_names_file_and_line(cli, make_project, tmp_path):
    project = make_project(WORKFLOWS)
    env_file = tmp_path / "bad.env"
    env_file.write_text("A=1\n# fine\nthis line holds tok-123 and no equals sign\n")
    res = cli("headless", "plan", "--env-file", str(env_file), "envs", cwd=project)
    assert res.returncode == 2
    [line] = res.stderr.strip().splitlines()
    assert f"{env_file}:3" in line and "expected KEY=VALUE" in line
    assert "tok-123" not in line  # the line is not echoed: env files hold tokens
