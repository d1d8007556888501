"""Variable substitution: the syntaxes, shell variables left alone, built-ins,
$variables_as_args, typed CLI overrides, and that no value can run anything.
The part with real agents and the CLI (integration); the rest: tests/unit/test_substitution.py."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

_SHELL_MODEL_PROBE = textwrap.dedent(
    """
    import json, sys
    from lanpool.app.workflows.substitute import UnsafeVariable, substitute_commands
    out = {"plain": substitute_commands(sys.argv[1:], {"x": "$(touch pwned)"})}
    out["plain_loaded"] = "app.workflows.shell_model" in sys.modules
    try:
        substitute_commands(["(( N > 1 ))"], {"n": "a"}, env_copies={"N": "n"})
        out["copy"] = "placed"
    except UnsafeVariable as exc:
        out["copy"] = str(exc)
    out["ref"] = substitute_commands(["echo $x"], {"x": "$(touch pwned)"})
    print(json.dumps(out))
    """
)


def test_a_script_without_references_is_kept_as_written_without_the_shell_model():
    """The start-up shortcut: commands that name no variable come back as written,
    without importing the shell model; a script with a reference, or an env copy to trace
    through arithmetic, is still read as bash reads it (the attack: the checks still run)."""
    repo = Path(__file__).resolve().parents[2]
    env = dict(os.environ, PYTHONPATH=str(repo))
    cmds = ["echo 'hi' \\", "  there", "cat <<EOF", "body", "EOF"]
    out = subprocess.run(
        [sys.executable, "-c", _SHELL_MODEL_PROBE, *cmds], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["plain"] == cmds and got["plain_loaded"] is False
    assert "arithmetic" in got["copy"]
    assert got["ref"] == ["echo \\$\\(touch\\ pwned\\)"]  # escaped: the model read it
