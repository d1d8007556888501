"""The runner daemon: an SSH server that runs lanpool jobs on this machine.

Imports `protocol` only, never `app`.
"""
