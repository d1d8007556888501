"""Shell completion for bash and zsh.

`app completion bash|zsh` prints a script. The command line's shape (verbs, their
options, which options take a value, which positional is a workflow or a run) is
read from the argparse parsers when the script is made and embedded in it as JSON,
so it always matches the installed `app`. On each Tab the script runs
`app __complete --spec JSON -- WORD... CURRENT`, which prints one candidate a line.
That call must answer in a blink, so it never imports the parsers (app.cli.parser
pulls in the controller and asyncssh: ~1.5 s); only the project's workflow files
(workflow names, variables) and a read-only look at the store (run names).
"""

import argparse
import json
import shlex
import sqlite3
from pathlib import Path
from typing import Any

_TOP = ("headless", "agent", "completion", "--help", "--version")
SHELLS = ("bash", "zsh")
_RUNS_SHOWN = 200  # the newest runs: enough to complete what people type, quick to read


def _node(parser: argparse.ArgumentParser) -> dict[str, Any]:
    """A parser as the data completion needs: options, sub-verbs, what its positional names."""
    node: dict[str, Any] = {"options": {}, "verbs": {}, "arg": None}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                node["verbs"][name] = _node(sub)
        elif action.option_strings:
            # False: a flag; True: takes a value; "run": takes a run's name (--resume RUN|JOB).
            takes: bool | str = "run" if "RUN" in str(action.metavar or "") else action.nargs != 0
            for spelling in action.option_strings:
                node["options"][spelling] = takes
        elif node["arg"] is None:
            node["arg"] = _arg_kind(action)
    return node


def _arg_kind(action: argparse.Action) -> str | None:
    if action.dest == "workflow":
        return "workflow"
    if "RUN" in str(action.metavar or ""):
        return "run"
    return None


def verb_helps(parser: argparse.ArgumentParser) -> list[tuple[str, str]]:
    """Each verb of `parser` with its one-line help, in the parser's order (for `app --help`)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return [(a.dest, a.help or "") for a in action._choices_actions]
    return []


def script(shell: str, parsers: dict[str, argparse.ArgumentParser]) -> str:
    """The completion script for `shell`, with the shape of each top-level word's parser."""
    spec = shlex.quote(json.dumps({word: _node(p) for word, p in parsers.items()}, separators=(",", ":")))
    if shell == "bash":
        return _BASH.replace("@SPEC@", spec)
    return _ZSH.replace("@SPEC@", spec)


_BASH = """\
# lanpool completion for bash: eval "$(app completion bash)" in ~/.bashrc
_lanpool_app_spec=@SPEC@
_lanpool_app() {
    local IFS=$'\\n'
    local words=("${COMP_WORDS[@]:1:COMP_CWORD}")
    COMPREPLY=($(command "${COMP_WORDS[0]}" __complete --spec "$_lanpool_app_spec" -- "${words[@]}" 2>/dev/null))
}
complete -o default -F _lanpool_app app
"""

_ZSH = """\
#compdef app
# lanpool completion for zsh: eval "$(app completion zsh)" in ~/.zshrc (after compinit)
_lanpool_app_spec=@SPEC@
_lanpool_app() {
    local -a candidates
    candidates=("${(@f)$(command ${words[1]} __complete --spec "$_lanpool_app_spec" -- "${(@)words[2,CURRENT]}" 2>/dev/null)}")
    if (( ${#candidates} )) && [[ -n ${candidates[1]} ]]; then
        compadd -a candidates
    else
        _files
    fi
}
compdef _lanpool_app app
"""


def complete(spec: dict[str, Any], words: list[str], cwd: Path, db: Path | None) -> list[str]:
    """Candidates for the last of `words` (the words after `app`, the one being typed last)."""
    *done, cur = words or [""]
    if not done:
        return _matching(_TOP, cur)
    if done[0] == "completion":
        return _matching(SHELLS, cur) if len(done) == 1 else []
    node = spec.get(done[0])
    if node is None:
        return []
    workflow: str | None = None
    project_dir: Path | None = None
    positional = False
    skip = False
    for i, word in enumerate(done[1:], start=1):
        if skip:
            skip = False
            if done[i - 1] == "--project":
                project_dir = cwd / word
            continue
        if word.startswith("-") and word != "-":
            # An option, or after the workflow name a variable (`--lr 0.1`): both take the next word.
            skip = bool(node["options"].get(word.partition("=")[0], workflow is not None)) and "=" not in word
        elif not positional and word in node["verbs"]:
            node = node["verbs"][word]
        elif not positional:
            positional = True
            if node["arg"] == "workflow":
                workflow = word
    if skip:  # the value of an option
        prev = done[-1]
        if node["options"].get(prev) == "run":
            return _matching(_runs(db), cur)
        return []  # a path, a number, a name: the shell's own (file) completion
    root = _project_root(project_dir or cwd)
    if workflow is not None:
        if cur.startswith("-") or not cur:
            variables = [f"--{v}" for v in _variables(root, workflow)]
            return _matching([*variables, *node["options"]], cur)
        return []
    if cur.startswith("-"):
        return _matching(node["options"], cur)
    if not positional and node["verbs"]:
        return _matching(node["verbs"], cur)
    if node["arg"] == "workflow" and not positional:
        return _matching(_workflows(root), cur)
    if node["arg"] == "run":
        return _matching(_runs(db), cur)
    return []


def _matching(candidates: Any, prefix: str) -> list[str]:
    return [c for c in candidates if c.startswith(prefix)]


def _project_root(start: Path) -> Path | None:
    from lanpool.app.workflows.loader import find_project

    return find_project(start)


def _workflows(root: Path | None) -> list[str]:
    project = _load(root)
    return sorted(project.workflows) if project is not None else []


def _variables(root: Path | None, workflow: str) -> list[str]:
    """The variables a run of `workflow` may set: its own and those of the workflows it depends on."""
    project = _load(root)
    if project is None or workflow not in project.workflows:
        return []
    names: dict[str, None] = {}
    seen: set[str] = set()
    todo = [workflow]
    while todo:
        name = todo.pop()
        if name in seen or name not in project.workflows:
            continue
        seen.add(name)
        names.update(dict.fromkeys(project.variables_of(name)))
        todo.extend(dep.workflow for dep in project.workflows[name].depends_on if not dep.tag)
    return sorted(names)


def _load(root: Path | None) -> Any:
    if root is None:
        return None
    from lanpool.app.workflows.loader import load_workflows
    from lanpool.app.workflows.model import WorkflowError

    try:
        return load_workflows(root)
    except (WorkflowError, OSError, ValueError):  # a half-written file: no candidates, no traceback
        return None


def _runs(db: Path | None) -> list[str]:
    """The newest run names, read-only: completion never creates or migrates the store."""
    if db is None or not db.is_file():
        return []
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=0.5)
        try:
            rows = conn.execute("SELECT name FROM runs ORDER BY created_at DESC LIMIT ?", (_RUNS_SHOWN,)).fetchall()
        finally:
            conn.close()
    except sqlite3.Error:
        return []
    return [r[0] for r in rows]


def main(argv: list[str]) -> int:
    """`app __complete --spec JSON -- WORD...`: candidates, one a line; nothing (not an error) when lost."""
    if len(argv) < 3 or argv[0] != "--spec" or argv[2] != "--":
        return 2
    try:
        spec = json.loads(argv[1])
    except ValueError:
        return 2
    from lanpool.app.home import ControllerHome

    print("\n".join(complete(spec, argv[3:], Path.cwd(), ControllerHome.default().db)))
    return 0
