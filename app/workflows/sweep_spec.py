"""A workflow's `sweep:` checked and read (the points are drawn in app/runs/sweep.py):

    sweep:                        # a grid: every combination
      variables:
        lr: [1e-4, 3e-4, 1e-3]
        batch: [32, 64]

    sweep:                        # random: `samples` points; the same `seed`, the same points
      method: random
      samples: 8
      seed: 7
      variables:
        lr: {log_uniform: [1e-5, 1e-2]}
        dropout: {uniform: [0.0, 0.3]}
        layers: {int_uniform: [2, 6]}
        batch: {choice: [32, 64]}  # (a plain list is a choice too)

The variables sit under `variables:` so that a workflow's own variable may be called `seed` or
`method`. Every error names the key at fault.
"""

from collections.abc import Callable
from typing import Any

from lanpool.app.workflows.model import Scalar, StopWorst, SweepSpec, WorkflowError

MAX_POINTS = 1000  # one run's jobs: a bigger grid is a typo more often than a plan
MAX_VALUES = 1000  # of one variable
SWEEP_KEYS = ("method", "samples", "seed", "variables", "stop_worst")
MAX_RUNGS = 20
DISTRIBUTIONS = ("choice", "uniform", "log_uniform", "int_uniform")


def parse_sweep(item: Any, err: Callable[[str, str], WorkflowError]) -> SweepSpec | None:
    raw = item.get("sweep")
    if raw is None:
        return None

    def bad(message: str) -> WorkflowError:
        return err(f"'sweep': {message}", "sweep")

    if not isinstance(raw, dict):
        raise bad("must be a mapping with 'variables' (and 'method: random', 'samples', 'seed' to draw points)")
    unknown = [str(k) for k in raw if k not in SWEEP_KEYS]
    if unknown:
        raise bad(f"takes {', '.join(SWEEP_KEYS)}, not {', '.join(unknown)[:80]} (variables go under 'variables')")
    method = raw.get("method", "grid")
    if method not in ("grid", "random"):
        raise bad(f"'method' is grid or random, not {str(method)[:40]!r}")
    variables = raw.get("variables")
    if not isinstance(variables, dict) or not variables:
        raise bad("needs 'variables': each swept variable with its values (a list) or a distribution")
    spec: dict[str, tuple[str, list[Scalar]]] = {}
    for name, given in variables.items():
        spec[str(name)] = _variable(str(name), given, method, bad)
    stop_worst = _stop_worst(raw.get("stop_worst"), bad) if "stop_worst" in raw else None
    if method == "grid":
        for key in ("samples", "seed"):
            if key in raw:
                raise bad(f"'{key}' is for 'method: random'; a grid runs every combination")
        size = 1
        for _kind, values in spec.values():
            size *= len(values)
        if size > MAX_POINTS:
            raise bad(f"{size} points; one run takes at most {MAX_POINTS} (sweep fewer values)")
        return SweepSpec(method="grid", variables=spec, stop_worst=stop_worst)
    samples = raw.get("samples")
    if isinstance(samples, bool) or not isinstance(samples, int) or not 1 <= samples <= MAX_POINTS:
        raise bad(f"'method: random' needs 'samples', a whole number from 1 to {MAX_POINTS}")
    seed = raw.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise bad(f"'seed' must be a whole number, not {str(seed)[:40]!r}")
    return SweepSpec(method="random", samples=samples, seed=seed, variables=spec, stop_worst=stop_worst)


def _stop_worst(raw: Any, bad: Callable[[str], WorkflowError]) -> StopWorst:
    """`stop_worst: {metric: val_loss, at: [100, 300], keep: 0.5, mode: min}`."""
    shape = "a mapping like {metric: val_loss, at: [100, 300], keep: 0.5}"
    if not isinstance(raw, dict):
        raise bad(f"'stop_worst' must be {shape}")
    unknown = [str(k) for k in raw if k not in ("metric", "at", "keep", "mode")]
    if unknown:
        raise bad(f"'stop_worst' takes metric, at, keep, mode, not {', '.join(unknown)[:80]}")
    metric = raw.get("metric")
    if not isinstance(metric, str) or not metric.strip() or not metric.isprintable() or len(metric) > 100:
        raise bad(f"'stop_worst' needs 'metric', the name of a metric the job logs ({shape})")
    at = raw.get("at")
    at = [at] if isinstance(at, int) and not isinstance(at, bool) else at
    if (
        not isinstance(at, list)
        or not 1 <= len(at) <= MAX_RUNGS
        or any(isinstance(s, bool) or not isinstance(s, int) or s < 1 for s in at)
    ):
        raise bad(f"'stop_worst.at' lists the steps to decide at: 1 to {MAX_RUNGS} whole numbers >= 1")
    keep = raw.get("keep", 0.5)
    if isinstance(keep, bool) or not isinstance(keep, (int, float)) or not 0 < keep < 1:
        raise bad("'stop_worst.keep' is the part kept at each step, between 0 and 1 (0.5: the better half)")
    mode = raw.get("mode", "")
    if mode not in ("", "min", "max"):
        raise bad(f"'stop_worst.mode' is min or max, not {str(mode)[:20]!r}")
    return StopWorst(metric=metric, at=sorted(set(at)), keep=float(keep), mode=mode)


def _variable(name: str, given: Any, method: str, bad: Callable[[str], WorkflowError]) -> tuple[str, list[Scalar]]:
    if isinstance(given, list):
        given = {"choice": given}
    if not isinstance(given, dict) or len(given) != 1 or next(iter(given)) not in DISTRIBUTIONS:
        raise bad(
            f"variable {name!r}: give a list of values, or one of {', '.join(DISTRIBUTIONS)}: {{uniform: [0.1, 0.5]}}"
        )
    kind, values = next(iter(given.items()))
    if not isinstance(values, list) or not values or any(isinstance(v, (dict, list)) or v is None for v in values):
        raise bad(f"variable {name!r}: {kind} takes a list of values")
    if len(values) > MAX_VALUES:
        raise bad(f"variable {name!r}: {len(values)} values; at most {MAX_VALUES}")
    if kind == "choice":
        return kind, list(dict.fromkeys(values))
    if method == "grid":
        raise bad(f"variable {name!r}: a grid takes lists of values; {kind} is for 'method: random'")
    numbers = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    if len(values) != 2 or len(numbers) != 2:
        raise bad(f"variable {name!r}: {kind} takes [low, high], two numbers")
    low, high = numbers
    if kind == "int_uniform" and not all(isinstance(v, int) for v in numbers):
        raise bad(f"variable {name!r}: int_uniform takes two whole numbers")
    if low > high or (low == high and kind != "int_uniform"):
        raise bad(f"variable {name!r}: {kind} [{low}, {high}]: low must be below high")
    if kind == "log_uniform" and low <= 0:
        raise bad(f"variable {name!r}: log_uniform needs low > 0 (it draws the logarithm evenly)")
    return kind, [low, high]
