"""Shell completion (`app completion bash|zsh`, the hidden `app __complete`) and `app --help`.
The part with real agents and the CLI (integration); the rest: tests/unit/test_completion.py."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lanpool.app.cli.completion import _node
from lanpool.app.cli.parser import build_parser
from tests.harness import APP_MODULE, lanpool_env
from tests.unit.test_completion import VARIABLES, WORKFLOWS, project, spec  # noqa: F401 (fixtures, used by name)


def _app_on_path(tmp_path: Path) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    app = bin_dir / "app"
    app.write_text(f'#!/bin/sh\nexec {sys.executable} -m lanpool.app.cli.main "$@"\n')
    app.chmod(0o755)
    return bin_dir


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
def test_the_bash_script_completes_through_app___complete(tmp_path, project):
    env = lanpool_env(tmp_path / "home")
    env["PATH"] = f"{_app_on_path(tmp_path)}:{env['PATH']}"
    made = subprocess.run([*APP_MODULE, "completion", "bash"], env=env, capture_output=True, text=True, timeout=60)
    assert made.returncode == 0, made.stderr
    (tmp_path / "complete.bash").write_text(made.stdout)
    probe = (
        'source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _lanpool_app; printf "%s\\n" "${COMPREPLY[@]}"'
    )

    def tab(*words: str) -> list[str]:
        done = subprocess.run(
            ["bash", "-c", probe, "_", str(tmp_path / "complete.bash"), "app", *words],
            env=env,
            cwd=project,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        return [line for line in done.stdout.splitlines() if line]

    assert tab("headless", "pl") == ["plan"]
    assert tab("headless", "run", "tr") == ["train"]
    assert "--lr" in tab("headless", "run", "train", "--")


def test___complete_answers_without_loading_the_controller(tmp_path, project):
    """Each Tab runs it: it must not import asyncssh or the controller (~1.5 s)."""
    spec = json.dumps({"headless": _node(build_parser())})
    done = subprocess.run(
        [*APP_MODULE, "__complete", "--spec", spec, "--", "headless", "run", "train", "--l"],
        env=lanpool_env(tmp_path / "home", PYTHONPROFILEIMPORTTIME="1"),
        cwd=project,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["--lr"]
    imported = {line.split("|")[-1].strip() for line in done.stderr.splitlines() if "|" in line}
    assert (
        "lanpool.app.controller" not in imported
        and "asyncssh" not in imported
        and "lanpool.app.cli.parser" not in imported
    )


def test_completion_refuses_an_unknown_shell_in_one_line(tmp_path):
    done = subprocess.run(
        [*APP_MODULE, "completion", "fish"], env=lanpool_env(tmp_path), capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip().splitlines() == [
        "app completion: error: expects one shell, bash or zsh: app completion bash"
    ]


def test_help_lists_every_verb(tmp_path):
    done = subprocess.run(
        [*APP_MODULE, "--help"], env=lanpool_env(tmp_path), capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    listed = {line.split()[0] for line in done.stdout.splitlines() if line.startswith("  ")}
    verbs = set(build_parser().verb_parsers) | {
        name
        for a in build_parser()._actions
        if hasattr(a, "choices") and isinstance(a.choices, dict)
        for name in a.choices
    }
    assert {"plan", "metrics", "run", "status"} <= verbs <= listed, verbs - listed
    assert "app completion bash|zsh" in done.stdout


def test_version_flags(tmp_path):
    from lanpool import __version__

    for argv in (["--version"], ["headless", "--version"]):
        done = subprocess.run(
            [*APP_MODULE, *argv], env=lanpool_env(tmp_path), capture_output=True, text=True, timeout=60
        )
        assert (done.returncode, done.stdout.strip()) == (0, f"lanpool {__version__}"), done.stderr
