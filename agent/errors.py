"""The agent's base exception: a message the person running the agent can act on."""


class AgentError(Exception):
    """Raised for bad agent set-up (unreadable key file, data dir not writable...)."""
