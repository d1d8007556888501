"""protocol/__init__ imports each public name on first use (start-up time).

A verb that reads the store asks for JobState only; the message classes and their
validation load when something first names them, and every public name still resolves.
The part with real agents and the CLI (integration); the rest: tests/unit/test_protocol_lazy.py."""

import json
import subprocess
import sys


def test_job_state_alone_does_not_load_the_message_classes() -> None:
    code = (
        "import json, sys\n"
        "from lanpool.protocol import JobState\n"
        "assert JobState.DONE.is_terminal()\n"
        "before = sorted(m for m in sys.modules if m.startswith('lanpool.protocol'))\n"
        "from lanpool.protocol import LogChunk\n"
        "after = sorted(m for m in sys.modules if m.startswith('lanpool.protocol'))\n"
        "print(json.dumps([before, after]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    before, after = json.loads(out)
    assert "lanpool.protocol.messages" not in before and "lanpool.protocol.schema" not in before
    assert "lanpool.protocol.messages" in after
