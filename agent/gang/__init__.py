"""Detached gangs: the members of a multi-node job meet at node 0's agent and start together (hub.py says how)."""
