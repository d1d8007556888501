"""Into a running job from the controller: a command, a shell (through the one-time sshd, else on the channel), forwarded ports."""
