"""Workflow files: finding the project, parsing and validating workflows."""

from app.workflows.loader import find_project, load_workflows
from app.workflows.model import Project, Workflow, WorkflowError

__all__ = ["Project", "Workflow", "WorkflowError", "find_project", "load_workflows"]
