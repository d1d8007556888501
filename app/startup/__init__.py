"""Start-up time of every `app` command: what it leaves out, the library lookups it answers without child processes, imports with the GC paused."""
