"""How a job sees its variables besides substitution: `$variables_as_args` and the environment.

As dstack did, `$variables_as_args` is `--NAME VALUE` for every variable the
workflow sees (globals included, after overrides), and each variable is also an
environment variable named in upper case with `-` and `.` as `_` (`batch-size`
-> `BATCH_SIZE`), unless the workflow's `env:` sets that name. Names the system
or lanpool itself sets (PATH, HOME, LD_*, LANPOOL_*, ...) are never replaced by
a variable: a variable `path` must not break the job's PATH.
"""

from collections.abc import Mapping

from lanpool.app.workflows.substitute import escape_word

_KEPT = frozenset(
    {
        "PATH",
        "HOME",
        "USER",
        "LOGNAME",
        "SHELL",
        "PWD",
        "OLDPWD",
        "TERM",
        "LANG",
        "TMPDIR",
        "HOSTNAME",
        "IFS",
        "PS1",
        "PS4",
        "BASH_ENV",
        "ENV",
        "CDPATH",
        "SHELLOPTS",
        "BASHOPTS",
        "MASTER_ADDR",
        "MASTER_PORT",
        "WORLD_SIZE",
        "RANK",
        "LOCAL_RANK",
        "NODE_RANK",
        "CUDA_VISIBLE_DEVICES",
        "NVIDIA_VISIBLE_DEVICES",
    }
)
_KEPT_PREFIXES = ("LANPOOL_", "LD_", "PYTHON", "LC_", "NCCL_", "GLOO_", "BASH_FUNC_", "VIRTUAL_ENV", "PIP_", "UV_")


def env_name(variable: str) -> str:
    return variable.upper().replace("-", "_").replace(".", "_")


def variables_env(values: Mapping[str, str], workflow_env: Mapping[str, str]) -> dict[str, str]:
    """ENV_NAME -> value for each variable; where two variables give one name, the later (the workflow's own) wins."""
    out: dict[str, str] = {}
    for name, value in values.items():
        env = env_name(name)
        if env in workflow_env or env in _KEPT or env.startswith(_KEPT_PREFIXES):
            continue
        out[env] = value
    return out


def variable_of_env(values: Mapping[str, str], workflow_env: Mapping[str, str]) -> dict[str, str]:
    """ENV_NAME -> the variable it copies (substitute.py checks that arithmetic reads no string copied so)."""
    copies = variables_env(values, workflow_env)
    return {env_name(name): name for name in values if env_name(name) in copies}


def variables_as_args(values: Mapping[str, str], escaped: bool) -> str:
    """`--NAME VALUE` pairs; `escaped`: each value one shell word (for commands), else as written (env, paths)."""
    return " ".join(f"--{k} {escape_word(v) if escaped else v}" for k, v in values.items())
