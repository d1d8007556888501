"""Executors start a job's commands and report their output and exit.

`ProcessExecutor` runs them as plain processes on the host; `DockerExecutor`
(agent.executors.docker, imported only when an agent uses Docker, as the SDK
is slow to import) runs them in a container. `ExecutorChoice` picks one per job.
"""

from lanpool.agent.executors.base import (
    Adoption,
    Execution,
    Executor,
    ExecutorError,
    Handle,
    Launch,
    Outcome,
    OutputSink,
)
from lanpool.agent.executors.choice import MODES, ExecutorChoice
from lanpool.agent.executors.process import ProcessExecutor

__all__ = [
    "MODES",
    "Adoption",
    "Execution",
    "Executor",
    "ExecutorChoice",
    "ExecutorError",
    "Handle",
    "Launch",
    "Outcome",
    "OutputSink",
    "ProcessExecutor",
]
