"""This machine: its GPUs (and who holds each), their telemetry, and the resources it offers to jobs."""
