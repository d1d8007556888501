"""A job's shell on a TLS connection of its own: the offer, as a line on the exec channel.

The exec request `lanpool-exec JOB_ID --direct [-- ARGV]` (with a PTY) asks for it; the
agent answers with one line on the channel's stdout before anything else:
`lanpool-direct PORT CERT_SHA256 TOKEN_HEX` (the meaning of DirectOffer's fields), then
waits for that connection; the terminal's bytes go on it, while the channel keeps the
window-change requests and the exit status. When it cannot listen it answers
`lanpool-direct -` (NO_OFFER_LINE) and runs the shell on the channel; a line that is
neither, or none, also means the channel (the controller reads the rest as the job's output).
"""

import re

from lanpool.protocol.transfer_messages import DIRECT_TOKEN_BYTES, DirectOffer

# Hello.features: this agent takes `--direct` in a shell's exec request.
SHELL_DIRECT = "shell-direct"
DIRECT_FLAG = "--direct"
OFFER_PREFIX = b"lanpool-direct "
MAX_OFFER_LINE = 256
NO_OFFER_LINE = b"lanpool-direct -\n"
_LINE = re.compile(rb"lanpool-direct ([0-9]{1,5}) ([0-9a-f]{64}) ([0-9a-f]{%d})\n" % (2 * DIRECT_TOKEN_BYTES))


def offer_line(offer: DirectOffer) -> bytes:
    return b"%s%d %s %s\n" % (OFFER_PREFIX, offer.port, offer.cert_sha256.encode(), offer.token.hex().encode())


def parse_offer_line(line: bytes, job_id: str) -> DirectOffer | None:
    """The offer a line names (with its newline), or None when it is not one."""
    match = _LINE.fullmatch(line)
    if match is None or not 1 <= int(match[1]) <= 65535:
        return None
    return DirectOffer(job_id, int(match[1]), match[2].decode(), bytes.fromhex(match[3].decode()))
