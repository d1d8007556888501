"""Runners as this controller knows them: trust, adverts, discovery, host keys, the SSH session and the direct connection, placement by free resources."""
