"""Into a running job on this runner: the exec door, PTYs, container exec, one-time sshd shells, forwarded ports."""
