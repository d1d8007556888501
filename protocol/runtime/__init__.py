"""What both sides run on besides the messages: the event loop, lanpool's change to asyncssh's transport, the TLS relay of direct shells."""
