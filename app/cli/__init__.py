"""The `app` command line: `app headless <verb>` and `app agent <verb>`."""
