"""Into a running job from the controller: a command, a shell (on the channel, a direct TLS connection or the one-time sshd), forwarded ports."""
