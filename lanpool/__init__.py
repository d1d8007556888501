"""lanpool: train models on the GPU machines of your LAN, with no server.

The distribution's one import name. Its sub-packages are the repository's
top-level folders, linked here so that a clone imports them as an installed
copy does: `lanpool.protocol` (the wire), `lanpool.agent` (the runner daemon),
`lanpool.app` (the controller: CLI and TUI) and `lanpool.training` (the recipes
jobs run). A project's own `app` or `training` package never meets ours.

From Python: `lanpool.run`, `lanpool.compare`, `lanpool.runners`, `lanpool.Run`, `lanpool.Error`
(lanpool.app.api, docs/api.md), imported on first use: `import lanpool` stays light.
"""

from typing import Any

__version__ = "0.1.0"
_API = ("run", "compare", "runners", "Run", "Error")


def __getattr__(name: str) -> Any:
    if name in _API:
        from lanpool.app import api

        return getattr(api, name)
    raise AttributeError(f"module 'lanpool' has no attribute {name!r}")
