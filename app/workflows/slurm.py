"""A workflow's `slurm:` mapping (partition, account, qos, constraint): where a runner that
runs jobs through Slurm (`app agent serve --executor slurm`) submits them.

They travel as flat `slurm_*` keys of the job's resources (SubmitJob.resources);
runners without Slurm ignore them. Names are checked here, with the line of the
key at fault, and again by the runner: none may hold a space, a shell character
or a leading '-' (it would read as an sbatch option).
"""

import re
from collections.abc import Callable

from lanpool.app.workflows.line_map import LineMap
from lanpool.app.workflows.model import WorkflowError

SLURM_KEYS = ("partition", "account", "qos", "constraint")
_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")
_CONSTRAINT = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.&|,:*\[\]()]{0,255}$")


def slurm_name_problem(key: str, text: str) -> str:
    """Why `text` cannot be the Slurm `key` ("" when it can)."""
    if (_CONSTRAINT if key == "constraint" else _NAME).match(text):
        return ""
    return (
        f"slurm.{key} {text[:60]!r} is not a Slurm name: use letters, digits, '_', '.', '-' "
        "(no spaces or shell characters, no leading '-')"
    )


def parse_slurm(item: LineMap, err: Callable[[str, str], WorkflowError]) -> dict[str, str]:
    """The workflow's `slurm:` as resources keys ({"slurm_partition": "gpu"}); {} when absent."""
    raw = item.get("slurm")
    if raw is None:
        return {}
    if not isinstance(raw, LineMap):
        raise err(f"'slurm' must be a mapping with {', '.join(SLURM_KEYS)}", "slurm")
    out = {}
    for key, value in raw.items():
        if key not in SLURM_KEYS:
            raise err(f"unknown key {key!r} in slurm; known: {', '.join(SLURM_KEYS)}", "slurm")
        text = str(value)
        problem = "" if "$" in text else slurm_name_problem(key, text)  # a variable: once substituted
        if problem:
            raise err(problem, "slurm")
        out[f"slurm_{key}"] = text
    return out
