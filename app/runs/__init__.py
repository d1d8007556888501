"""A run from plan to result: planning and cache keys, placement, the run loop, resume, names, env overrides, retention of old runs."""
