"""One entry of `workflows:` checked key by key and turned into a Workflow.

Both dialects are read: lanpool's keys and those of the 2022 dstack formats
(`provider: python` with `script`, `environment`, KEY=VALUE env lists; the
older and newer spellings are first rewritten by app/workflows/dialects.py).
Every error names the entry's workflow and the line of the key at fault.
"""

from collections.abc import Callable, Iterable
from pathlib import Path, PurePosixPath
from typing import Any

from lanpool.app.workflows.dialects import normalize
from lanpool.app.workflows.limits import MAX_DURATION_S, parse_duration, parse_limits
from lanpool.app.workflows.line_map import LineMap
from lanpool.app.workflows.model import (
    ArtifactSpec,
    Dependency,
    Scalar,
    Workflow,
    WorkflowError,
    flag,
    render_value,
)
from lanpool.app.workflows.resources import check_resources
from lanpool.app.workflows.slurm import parse_slurm
from lanpool.app.workflows.sweep_spec import parse_sweep
from lanpool.protocol.transfer_messages import abs_artifact_problem

WORKFLOW_KEYS = (
    "name",
    "help",
    "image",
    "commands",
    "provider",
    "version",
    "requirements",
    "script",
    "args",
    "env",
    "environment",
    "artifacts",
    "working_dir",
    "resources",
    "nodes",
    "executor",
    "pull",
    "depends-on",
    "resume-from",
    "ports",
    "max_duration",
    "retry",
    "priority",
    "dev",
    "idle",
    "ide",
    "slurm",
    "hold_base",
    "sweep",
)
RESOURCE_KEYS = ("gpu", "cpu", "memory", "shm_size", "interruptible")
GPU_KEYS = ("count", "name", "memory")
MAX_NODES = 1024  # a gang larger than any LAN: a typo, not a plan
# A workflow's name is a column of `status` and goes on the wire (at most 256 there, with no
# control characters: protocol/schema.py); longer is a paste gone wrong, refused with its file:line.
MAX_NAME = 100

# A message and the key it is about -> the error, placed at that key's line.
AtKey = Callable[[str, str], WorkflowError]


def close_matches(word: str, possibilities: Iterable[str], n: int = 1) -> list[str]:
    """difflib's "did you mean", imported on the first misspelling: not on every `run`'s start."""
    import difflib

    return difflib.get_close_matches(word, possibilities, n=n)


def _unknown_key(key: Any, known: tuple[str, ...], what: str, path: Path, line: int) -> WorkflowError:
    close = close_matches(str(key), known, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else f"; known keys: {', '.join(known)}"
    return WorkflowError(f"unknown key {key!r} in {what}{hint}", path, line)


def parse_workflow(item: Any, path: Path, parent_line: int, notes: list[str] | None = None) -> Workflow:
    """One entry; what a 2022 spelling left out (ignored keys) is said in `notes`."""
    if not isinstance(item, LineMap):  # every YAML mapping loads as a LineMap
        raise WorkflowError("each entry of 'workflows' must be a mapping with a 'name'", path, parent_line)
    item = normalize(item, path, notes if notes is not None else [])
    for key in item:
        if key not in WORKFLOW_KEYS:
            raise _unknown_key(key, WORKFLOW_KEYS, "a workflow", path, item.line_of(key))
    name = item.get("name")
    if not isinstance(name, str) or not name.strip():
        raise WorkflowError("a workflow needs a 'name' (a string)", path, item.line)
    if len(name) > MAX_NAME or not name.isprintable():
        shown = repr(name[:40]) + ("..." if len(name) > 40 else "")
        what = f"is {len(name)} characters long" if len(name) > MAX_NAME else "holds a control character"
        raise WorkflowError(
            f"workflow name {shown} {what}: name it in at most {MAX_NAME} printable characters",
            path,
            item.line_of("name"),
        )

    def err(message: str, key: str) -> WorkflowError:
        return WorkflowError(f"workflow {name!r}: {message}", path, item.line_of(key))

    provider = item.get("provider", "")
    if provider not in ("", "python", "bash", "docker"):
        raise err(f"unknown provider {provider!r}: use 'python' (script), or 'image' + 'commands'", "provider")
    commands = item.get("commands")
    if provider == "python":
        if not isinstance(item.get("script"), str) or not item["script"].strip():
            raise err("'provider: python' needs a 'script' to run", "provider")
        if commands is not None:
            raise err("'provider: python' runs 'script'; drop 'commands' or the provider", "commands")
        commands = []
    else:
        if (
            not isinstance(commands, list)
            or not commands
            or not all(isinstance(c, (str, int, float)) for c in commands)
        ):
            raise err("needs 'commands' (a list of shell lines), or 'provider: python' with a 'script'", "commands")
    for key in ("image", "version", "requirements", "script", "working_dir", "executor", "help"):
        if key in item and not isinstance(item[key], (str, int, float)):
            raise err(f"'{key}' must be a string", key)
    args = item.get("args", [])
    if not isinstance(args, (list, str)) or (
        isinstance(args, list) and not all(isinstance(a, (str, int, float)) for a in args)
    ):
        raise err("'args' must be a string or a list of strings", "args")
    executor = str(item.get("executor", "") or "")
    if executor not in ("", "docker", "process"):
        raise err(f"'executor' must be 'docker' or 'process', not {executor!r}", "executor")
    pull = str(item.get("pull", "missing"))
    if pull not in ("never", "missing", "always"):
        raise err(f"'pull' must be never, missing or always, not {pull!r}", "pull")
    working_dir = str(item.get("working_dir", "") or "")
    if PurePosixPath(working_dir).is_absolute() or ".." in PurePosixPath(working_dir).parts:
        raise err("'working_dir' must be a relative path in the workspace", "working_dir")
    deps, include = _parse_depends_on(item, err)
    resume_from = _parse_resume_from(item, err)
    max_duration_s, retry_on, retry_limit, retry_delay_s = parse_limits(item, err)
    hold_base = flag(item.get("hold_base", True))
    if hold_base is None:
        raise err("'hold_base' must be true or false", "hold_base")
    artifacts = _parse_artifacts(item, err)
    image = str(item.get("image", "") or "")
    check_container_artifacts([a.path for a in artifacts], image, provider, executor, err)
    version = item.get("version", "")
    if isinstance(version, float):  # a Python version: `3.10` means 3.10, not 3.1
        version = item.scalar_text.get("version", version)
    return Workflow(
        name=name,
        commands=[render_value(c) for c in commands],
        help=str(item.get("help", "") or ""),
        image=image,
        provider=provider,
        version=render_value(version),
        requirements=str(item.get("requirements", "") or ""),
        script=str(item.get("script", "") or ""),
        args=[render_value(a) for a in args] if isinstance(args, list) else args,
        env=_parse_env(item, err),
        artifacts=artifacts,
        working_dir=working_dir,
        resources={**_parse_resources(item, err), **parse_slurm(item, err)},
        nodes=_parse_nodes(item, err),
        executor=executor,
        pull=pull,
        depends_on=deps,
        repo_include=include,
        resume_from=resume_from,
        ports=_parse_ports(item, err),
        port_count=_parse_port_count(item, err),
        passed_env=_parse_passed_env(item, err),
        max_duration_s=max_duration_s,
        retry_on=retry_on,
        retry_limit=retry_limit,
        retry_delay_s=retry_delay_s,
        hold_base=hold_base,
        priority=_parse_priority(item, err),
        dev=_parse_dev(item, err) or bool(_parse_ide(item, err)),
        idle_s=_parse_idle(item, err),
        ide=_parse_ide(item, err),
        sweep=parse_sweep(item, err),
        file=path,
        line=item.line,
        key_lines=dict(item.key_lines),
    )


def _env_key(item: LineMap, err: AtKey) -> str:
    if "environment" in item and "env" in item:
        raise err("has both 'env' and 'environment': keep one", "env")
    return "environment" if "environment" in item else "env"


def _parse_env(item: LineMap, err: AtKey) -> dict[str, str]:
    key = _env_key(item, err)
    raw = item.get(key, {}) or {}
    # dstack accepted both a mapping and a list of KEY=VALUE strings (a bare NAME: _parse_passed_env).
    if isinstance(raw, list):
        pairs = {}
        for entry in raw:
            if isinstance(entry, str) and "=" not in entry and entry.isidentifier():
                continue
            if not isinstance(entry, str) or "=" not in entry:
                raise err(f"'{key}' entries must be KEY=VALUE, or a bare NAME to pass your own NAME", key)
            k, _, v = entry.partition("=")
            pairs[k] = v
        raw = pairs
    if not isinstance(raw, dict):
        raise err(f"'{key}' must be a mapping of names to values", key)
    env = {}
    for k, v in raw.items():
        if not isinstance(k, str) or not k.isidentifier():
            raise err(f"{k!r} is not a valid environment variable name", key)
        if isinstance(v, (dict, list)):
            raise err(f"env {k!r} must be a string or number", key)
        env[k] = "" if v is None else render_value(v)
    return env


def _parse_passed_env(item: LineMap, err: AtKey) -> list[str]:
    """`env: [- WANDB_API_KEY]` (2022): the value is the caller's own, read from its environment
    when the job is sent (app/secret_store.py caller_values), masked in logs and never stored."""
    key = _env_key(item, err)
    raw = item.get(key) or []
    if not isinstance(raw, list):
        return []
    names = [e for e in raw if isinstance(e, str) and "=" not in e and e.isidentifier()]
    given = {e.partition("=")[0] for e in raw if isinstance(e, str) and "=" in e}
    twice = sorted({n for n in names if names.count(n) > 1} | (set(names) & given))
    if twice:
        raise err(f"env {twice[0]!r} is given twice: keep one", key)
    return names


def _parse_artifacts(item: LineMap, err: AtKey) -> list[ArtifactSpec]:
    raw = item.get("artifacts", []) or []
    if not isinstance(raw, list):
        raise err("'artifacts' must be a list of paths", "artifacts")
    out = []
    for entry in raw:
        nodes = "0"
        if isinstance(entry, dict):
            unknown = set(entry) - {"path", "nodes"}
            if unknown:
                raise err(f"artifact entries take 'path' and 'nodes', not {sorted(unknown)}", "artifacts")
            nodes = render_value(entry.get("nodes", "0"))
            if nodes not in ("0", "all"):
                raise err(f"artifact 'nodes' must be 0 or all, not {nodes!r}", "artifacts")
            entry = entry.get("path")
        if not isinstance(entry, str):
            raise err("'artifacts' must be a list of paths", "artifacts")
        check_artifact_path(entry, err)
        out.append(ArtifactSpec(entry, nodes))
    return out


def check_artifact_path(path: str, err: AtKey) -> None:
    """A path in the workspace, or an absolute one (a container job's: copied out of its
    container when it ends, see docs/workflows.md) that the runner takes too."""
    if not path.strip():
        raise err("artifact path '' is empty: name a file or dir in the workspace", "artifacts")
    p = PurePosixPath(path)
    if not p.is_absolute():
        if ".." in p.parts:
            raise err(f"artifact path {path!r} must stay inside the workspace (relative, no '..')", "artifacts")
        return
    problem = abs_artifact_problem(path)  # the runner's own rule (protocol)
    if problem:
        raise err(problem, "artifacts")


def check_container_artifacts(paths: list[str], image: str, provider: str, executor: str, err: AtKey) -> None:
    """An absolute artifact path is copied out of the job's container: a workflow that can only
    run as a process (no image, or `executor: process`) is refused with what to change."""
    path = next((p for p in paths if p.startswith("/")), None)
    if path is None or (executor != "process" and (image or provider == "python")):
        return
    fix = "drop `executor: process`" if executor == "process" else "give the workflow an `image:`"
    raise err(
        f"artifact {path!r} is outside the workspace: only a container job's absolute paths are copied out "
        f"({fix}), or write it under the workspace (e.g. `artifacts: [{PurePosixPath(path).name}]`)",
        "artifacts",
    )


def _parse_resources(item: LineMap, err: AtKey) -> dict[str, Scalar | dict[str, Scalar]]:
    raw = item.get("resources") or LineMap()
    if not isinstance(raw, LineMap):
        raise err("'resources' must be a mapping (gpu, cpu, memory, shm_size)", "resources")
    for key in raw:
        if key not in RESOURCE_KEYS:
            close = close_matches(str(key), RESOURCE_KEYS, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f"; known: {', '.join(RESOURCE_KEYS)}"
            raise WorkflowError(
                f"workflow {item['name']!r}: unknown resource {key!r}{hint}",
                err("", "resources").file,
                raw.line_of(key) if isinstance(raw, LineMap) else None,
            )
    gpu = raw.get("gpu")
    if isinstance(gpu, dict):
        for key in gpu:
            if key not in GPU_KEYS:
                raise err(f"unknown key {key!r} in resources.gpu; known: {', '.join(GPU_KEYS)}", "resources")
    # Values are checked now when they hold no variable, else after substitution.
    for key, value in raw.items():
        if "$" not in str(value):  # point at the resource's own line, not at `resources:`

            def at_key(msg: str, key: Any = key) -> WorkflowError:
                return WorkflowError(f"workflow {item['name']!r}: {msg}", err("", "resources").file, raw.line_of(key))

            check_resources({key: value}, at_key)
    return dict(raw)


def _parse_nodes(item: LineMap, err: AtKey) -> int | str:
    nodes = item.get("nodes", 1)
    if isinstance(nodes, str) and "$" in nodes:
        return nodes
    if isinstance(nodes, bool) or not isinstance(nodes, int) or not 1 <= nodes <= MAX_NODES:
        raise err(f"'nodes' must be a whole number from 1 to {MAX_NODES}, not {repr(nodes)[:40]}", "nodes")
    return nodes


def _parse_resume_from(item: LineMap, err: AtKey) -> str:
    """`resume-from: RUN|JOB|WORKFLOW:TAG` (variables allowed): what `run --resume` takes."""
    if "resume-from" not in item or item["resume-from"] is None:
        return ""
    raw = item["resume-from"]
    if isinstance(raw, bool) or not isinstance(raw, (str, int, float)):
        raise err("'resume-from' must be a run name, a job id or WORKFLOW:TAG (a string)", "resume-from")
    # A job id of digits only reads as a number in YAML: keep it as written.
    text = str(item.scalar_text.get("resume-from", raw)).strip()
    if not text:
        raise err("'resume-from' is empty: name a run, a job id or WORKFLOW:TAG (or drop the key)", "resume-from")
    if "$" not in text and any(c.isspace() for c in text):
        raise err(f"'resume-from' must be one run name, job id or WORKFLOW:TAG, not {text!r}", "resume-from")
    return text


def _parse_depends_on(item: LineMap, err: AtKey) -> tuple[list[Dependency], list[str] | None]:
    raw = item.get("depends-on")
    if raw is None:
        return [], None
    include = None
    if isinstance(raw, dict):
        unknown = set(raw) - {"workflows", "repo"}
        if unknown:
            raise err(f"'depends-on' takes 'workflows' and 'repo', not {sorted(unknown)}", "depends-on")
        repo = raw.get("repo") or {}
        if repo:
            if not isinstance(repo, dict) or set(repo) - {"include"}:
                raise err("'depends-on.repo' takes 'include: [globs]'", "depends-on")
            include = repo.get("include") or []
            if not isinstance(include, list) or not all(isinstance(g, str) for g in include):
                raise err("'depends-on.repo.include' must be a list of globs", "depends-on")
        raw = raw.get("workflows") or []
    if not isinstance(raw, list) or not all(isinstance(d, str) and d.strip() for d in raw):
        raise err("'depends-on' must be a list of workflow names (or a mapping with 'workflows')", "depends-on")
    deps = []
    for entry in raw:
        name, _, tag = entry.partition(":")
        deps.append(Dependency(name.strip(), tag.strip() or None))
    return deps, include


MAX_PORTS = 16  # as the runner allows (agent/jobs/request.py)


def _parse_ports(item: LineMap, err: AtKey) -> list[int]:
    """`ports: [6006, 8888]`: the job's loopback ports, forwarded to the controller while it runs."""
    ports = item.get("ports", []) or []
    if isinstance(ports, int) and not isinstance(ports, bool):
        return []  # a count (_parse_port_count)
    if not isinstance(ports, list) or not all(isinstance(p, int) and not isinstance(p, bool) for p in ports):
        raise err("'ports' must be a list of port numbers, e.g. [6006, 8888], or a count of ports to pick", "ports")
    bad = [p for p in ports if not 1 <= p <= 65535]
    if bad:
        raise err(f"'ports': {bad[0]} is not a port number (1 to 65535)", "ports")
    if len(set(ports)) > MAX_PORTS:
        raise err(f"'ports' lists {len(set(ports))} ports: at most {MAX_PORTS}", "ports")
    return sorted(set(ports))


DEFAULT_IDLE_S = 2 * 3600.0  # a dev environment nobody is in for this long ends (`idle:`, `dev --idle`)


def _parse_dev(item: LineMap, err: AtKey) -> bool:
    """`dev: true`: `run` (and `dev`) start it as a dev environment: it stays up for ssh and editors."""
    dev = flag(item.get("dev", False))
    if dev is None:
        raise err("'dev' must be true or false (true: the job stays up for ssh and your editor)", "dev")
    return dev


IDES = ("jupyter",)  # what `ide:` (and `dev --ide`) can start in a dev environment (app/runs/dev.py)


def _parse_ide(item: LineMap, err: AtKey) -> str:
    """`ide: jupyter`: a dev environment (`dev: true` implied) that also serves JupyterLab."""
    value = item.get("ide")
    if value is None:
        return ""
    if value not in IDES:
        raise err(
            f"'ide' {str(value)[:40]!r} is not one lanpool starts: {', '.join(IDES)} "
            "(VS Code and other ssh editors need no `ide:`: `app headless ssh-config`)",
            "ide",
        )
    if flag(item.get("dev", True)) is False:
        raise err("'ide' makes a dev environment: drop `dev: false`", "ide")
    return str(value)


def _parse_idle(item: LineMap, err: AtKey) -> float | None:
    """`idle: 2h` (or `off`): how long a dev environment stays up with no session into it."""
    if item.get("idle") is None:
        return None
    if flag(item["idle"]) is False:
        return 0.0
    try:
        return parse_duration(item["idle"], "'idle'", MAX_DURATION_S)
    except ValueError as exc:
        raise err(str(exc), "idle") from None


MAX_PRIORITY = 1000


def _parse_priority(item: LineMap, err: AtKey) -> int:
    """`priority: 10`: on a runner several people share, this workflow's jobs go before the same
    person's other waiting jobs (higher first); never before another person's turn (agent/jobs/turns.py)."""
    value = item.get("priority", 0)
    if not isinstance(value, int) or isinstance(value, bool) or not -MAX_PRIORITY <= value <= MAX_PRIORITY:
        raise err(
            f"'priority' must be a whole number from -{MAX_PRIORITY} to {MAX_PRIORITY} (higher starts first "
            f"among your jobs waiting on a runner), not {str(value)[:40]!r}",
            "priority",
        )
    return value


def _parse_port_count(item: LineMap, err: AtKey) -> int:
    """`ports: 2` (dstack 2022): two free ports the runner picks, given to the job as $PORT_0 and
    $PORT_1 and forwarded like listed ones. A number alone is always a count: `ports: 6006` is
    refused rather than guessed (a count of 6006, or port 6006?)."""
    count = item.get("ports")
    if not isinstance(count, int) or isinstance(count, bool):
        return 0
    if not 1 <= count <= MAX_PORTS:
        raise err(
            f"'ports: {count}': a number alone is a count of ports the runner picks ($PORT_0, ...), 1 to {MAX_PORTS}; "
            f"to forward port {count}, write ports: [{count}]",
            "ports",
        )
    return count
