"""What both sides run on besides the messages: the event loop, and lanpool's change to asyncssh's transport."""
