"""The Python a process job runs with: the interpreters the runner offers and each job's own environment."""
