"""Workflow files: finding the project, parsing and validating workflows."""

from lanpool.app.workflows.loader import find_project, load_workflows
from lanpool.app.workflows.model import Project, Workflow, WorkflowError

__all__ = ["Project", "Workflow", "WorkflowError", "find_project", "load_workflows"]
