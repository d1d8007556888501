"""Executors start a job's commands and report their output and exit.

The process executor is here now; the Docker executor plugs in beside it
through the same `Executor` interface.
"""

from agent.executors.base import Execution, Executor, Launch
from agent.executors.process import ProcessExecutor

__all__ = ["Execution", "Executor", "Launch", "ProcessExecutor"]
