"""Bytes between the controller and runners: the code snapshot going up by content, artifacts coming back checked and resumable."""
