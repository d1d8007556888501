"""The 2022 dstack spellings of a workflow entry, rewritten into lanpool's keys.

dstack's format changed three times in 2022; a project written for any of them
must load unchanged. Early 2022: `provider: python` with `python_script` and
`python`, a top-level `gpu`, `depends-on: [w:latest]`. Late 2022: `deps:` lists
of `- workflow: x` / `- tag: y`, `artifacts:` as `- path: x` objects that may
say `mount: true`, `cache:`. The rewrite keeps each key's line, so an error in
a rewritten key still points at what the user wrote.

What lanpool cannot do (dev environments, exposed ports, ssh into a job) is
refused here with one line saying what the key was for and what to use instead.
"""

import logging
from pathlib import Path
from typing import Any

from lanpool.app.workflows.line_map import LineMap
from lanpool.app.workflows.model import WorkflowError, flag

log = logging.getLogger(__name__)

# Renamed keys: (old, new). `python: 3.10` is the interpreter version, as `version:`; `file:`
# is mid-2022's name of provider python's script.
ALIASES = (("python_script", "script"), ("file", "script"), ("python", "version"))

# Providers dstack had that lanpool does not run -> what they did and what to do instead.
UNSUPPORTED_PROVIDERS = {
    "code": "starts a VS Code dev environment",
    "lab": "starts a JupyterLab dev environment",
    "notebook": "starts a Jupyter notebook dev environment",
    "ssh": "starts a dev environment to ssh into",
}
DEV_ENV_FIX = (
    "lanpool runs batch jobs, not dev environments: start the server in 'commands', list its port "
    "in 'ports', and open it from the URL `run` (or `app headless ports RUN`) prints"
)
OTHER_PROVIDERS = {
    "curl": "'provider: curl' downloads a URL: write 'commands: [curl -L -o FILE URL]' and list FILE in 'artifacts'",
    "torchrun": "'provider: torchrun' starts a distributed job: write 'nodes: N' and 'commands' that call torchrun",
}
# dstack's dependencies on another repository's workflow (`repo: {user, name}`, `user/repo/workflow`).
CROSS_REPO_FIX = (
    "lanpool runs one project's workflows: run that workflow in its own project with `--tag NAME`, "
    "then depend on ':NAME' here (every finished job of the run tagged NAME)"
)
UNSUPPORTED_KEYS = {
    "ssh": "'ssh' opens an ssh server in the job; lanpool jobs run none: "
    "use `app headless logs -f RUN` to follow a job, or ssh to the runner itself",
}
# Keys whose only effect was speed on dstack's cloud: a job runs the same without them.
IGNORED_KEYS = {"cache": "'cache' (dstack kept these paths between runs) is ignored: lanpool keeps none"}
# resources keys that chose where dstack ran the job: lanpool places jobs on runners.
IGNORED_RESOURCES = {
    "local": "'resources.local' (dstack ran the job on this machine) is ignored: lanpool places jobs on runners "
    "(`--runner NAME` picks one; `app agent serve` here makes this machine one)",
    "remote": "'resources.remote' (dstack ran the job in its cloud) is ignored: lanpool places jobs on runners",
}


def normalize(item: LineMap, path: Path, notes: list[str]) -> LineMap:
    """`item` with its 2022 dstack keys rewritten (or refused); notes on what is ignored go to `notes`."""
    name = item.get("name")
    label = f"workflow {name!r}: " if isinstance(name, str) else ""

    def err(message: str, key: str) -> WorkflowError:
        return WorkflowError(label + message, path, item.line_of(key))

    _refuse_unsupported(item, err)
    out = _copy(item)
    for old, new in ALIASES:
        if old in out:
            if new in out:
                raise err(f"has both {old!r} and {new!r} (the same setting): keep one", old)
            _rename(out, old, new)
    if "gpu" in out:  # early 2022: `gpu:` beside `resources:`, meaning resources.gpu
        resources = out.get("resources") or LineMap()
        if not isinstance(resources, LineMap):
            raise err("'resources' must be a mapping (gpu, cpu, memory, shm_size)", "resources")
        if "gpu" in resources:
            raise err("has both 'gpu' and 'resources.gpu': keep one", "gpu")
        merged = _copy(resources)
        merged["gpu"] = out["gpu"]
        merged.key_lines["gpu"] = out.line_of("gpu")
        merged.line = resources.line if "resources" in out else out.line_of("gpu")
        del out["gpu"]
        out["resources"] = merged
        out.key_lines.setdefault("resources", out.line_of("gpu"))
    resources = out.get("resources")
    if isinstance(resources, LineMap) and any(k in resources for k in IGNORED_RESOURCES):
        kept = _copy(resources)
        for key, note in IGNORED_RESOURCES.items():
            if key in kept:
                notes.append(f"{path}:{resources.line_of(key)}: {label}{note}")
                del kept[key]
        out["resources"] = kept
    if "deps" in out:
        if "depends-on" in out:
            raise err("has both 'deps' and 'depends-on' (the same setting): keep one", "deps")
        deps = _deps(out["deps"], err)
        _rename(out, "deps", "depends-on")
        out["depends-on"] = deps
    if isinstance(out.get("artifacts"), list):
        where = f"{path}:{out.line_of('artifacts')}: {label}"
        out["artifacts"] = [_artifact(a, where, notes) for a in out["artifacts"]]
    for key, note in IGNORED_KEYS.items():
        if key in out:
            notes.append(f"{path}:{out.line_of(key)}: {label}{note}")
            del out[key]
    return out


def _refuse_unsupported(item: LineMap, err: Any) -> None:
    provider = item.get("provider")
    if "provider" in item and not isinstance(provider, str):
        raise err("'provider' is a name (python, bash or docker), not a mapping or list", "provider")
    if isinstance(provider, str):
        provider = provider.split("@", 1)[0]  # `torchrun@experimental`: a version of a provider is that provider
    if isinstance(provider, str) and provider in UNSUPPORTED_PROVIDERS:
        raise err(f"'provider: {provider}' {UNSUPPORTED_PROVIDERS[provider]} in dstack; {DEV_ENV_FIX}", "provider")
    if isinstance(provider, str) and provider in OTHER_PROVIDERS:
        raise err(OTHER_PROVIDERS[provider], "provider")
    for key, message in UNSUPPORTED_KEYS.items():
        if key in item:
            raise err(message, key)


def _deps(raw: Any, err: Any) -> list[str]:
    """Late-2022 `deps:` entries (`- workflow: x`, `- tag: y`, or plain names) as `depends-on` strings."""
    if not isinstance(raw, list):
        raise err("'deps' must be a list of '- workflow: NAME' or '- tag: NAME' entries", "deps")
    out = []
    for entry in raw:
        if isinstance(entry, str) and entry.strip():
            out.append(entry)
        elif isinstance(entry, dict) and "repo" in entry:
            repo = entry["repo"]
            where = f"{repo.get('user', '?')}/{repo.get('name', '?')}" if isinstance(repo, dict) else str(repo)
            raise err(f"'deps' names a workflow of another repository ({where[:80]}): {CROSS_REPO_FIX}", "deps")
        elif isinstance(entry, dict) and len(entry) == 1 and isinstance(next(iter(entry.values())), str):
            key, value = next(iter(entry.items()))
            if key == "workflow":
                out.append(value)
            elif key == "tag":
                out.append(f":{value}")  # the run tagged `value`, whatever its workflows
            else:
                raise err(f"'deps' entries are '- workflow: NAME' or '- tag: NAME', not {key!r}", "deps")
        else:
            raise err("'deps' entries are '- workflow: NAME' or '- tag: NAME'", "deps")
    return out


def _artifact(entry: Any, where: str, notes: list[str]) -> Any:
    """`- path: x` with `mount: true` (dstack mounted it live): lanpool copies it back when the job ends."""
    if isinstance(entry, dict) and "mount" in entry:
        if flag(entry.get("mount")):
            notes.append(
                f"{where}artifact {entry.get('path')!r}: 'mount: true' is ignored; "
                "lanpool copies artifacts back when the job ends"
            )
        entry = {k: v for k, v in entry.items() if k != "mount"}
    return entry


def _copy(m: LineMap) -> LineMap:
    out = LineMap(m)
    out.line = m.line
    out.key_lines = dict(getattr(m, "key_lines", {}))
    out.scalar_text = dict(getattr(m, "scalar_text", {}))
    return out


def _rename(m: LineMap, old: str, new: str) -> None:
    m[new] = m.pop(old)
    if old in m.key_lines:
        m.key_lines[new] = m.key_lines.pop(old)
    if old in m.scalar_text:
        m.scalar_text[new] = m.scalar_text.pop(old)


def log_notes(notes: list[str]) -> None:
    for note in notes:
        log.warning("note: %s", note)
