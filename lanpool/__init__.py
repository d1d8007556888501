"""lanpool: train models on the GPU machines of your LAN, with no server.

The distribution's one import name. Its sub-packages are the repository's
top-level folders, linked here so that a clone imports them as an installed
copy does: `lanpool.protocol` (the wire), `lanpool.agent` (the runner daemon),
`lanpool.app` (the controller: CLI and TUI) and `lanpool.training` (the recipes
jobs run). A project's own `app` or `training` package never meets ours.
"""

__version__ = "0.1.0"
