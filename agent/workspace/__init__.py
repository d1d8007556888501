"""A job's files on the runner: the blob cache, staging, files read without following links, artifacts, the log spool, metrics files."""
