"""The runner daemon: an SSH server that runs lanpool jobs on this machine.

Imports `protocol` only, never `app`.
"""

__version__ = "0.1.0"
