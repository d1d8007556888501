"""A job's secrets (SubmitJob.masked) written *** in its log on the runner.

A secret can reach the log in pieces that a plain search does not see whole, yet a
reader does:

- terminal control bytes inside it: `s3cr\\x1b[31met` shows as `s3cret` on a terminal
  (and the controller's safe_text drops colour codes the same way). So where a chunk
  holds a control byte, secrets are also looked for in what a terminal shows of it
  (escape sequences and C0 controls but newline and tab left out), and a match
  masks the bytes it spans, the control bytes inside included. A chunk without any
  (almost every one) is a plain `bytes.replace` per secret.
- a line longer than MAX_LINE is cut into pieces (agent/executors/line_cutter.py): a
  secret straddling a cut is in neither piece whole. `held_tail` says how many bytes
  at the end of a cut piece could begin a secret: the job (agent.jobs.job) holds them
  back and puts them in front of the stream's next piece, so the match is made there.
  Bytes held back are not in the spool yet, so a re-adopted container resumes before
  them and reads them again: the byte accounting of the journal stays exact.
"""

import bisect
import re

MASK = b"***"
# What a terminal shows nothing of: C0 controls but \n and \t, and DEL; an ESC with the rest of
# its sequence: CSI (colours, cursor moves), OSC, DCS, APC, PM and SOS strings up to BEL or ST
# (OSC text is the window title, not the screen: it is searched plainly too), other escapes
# (charsets, keypad). One control byte first, so the regex engine skips plain text fast.
_INVISIBLE = re.compile(
    rb"[\x00-\x08\x0b-\x1f\x7f](?:(?<=\x1b)(?:"
    rb"\[[\x30-\x3f]*[\x20-\x2f]*[\x40-\x7e]"
    rb"|[\]P_^X][^\x07\x1b\n]*(?:\x07|\x1b\\)"
    rb"|[\x20-\x2f]*[\x30-\x7e]"
    rb"))?"
)
_CONTROLS = bytes([*range(0x00, 0x09), *range(0x0B, 0x20), 0x7F])
# An escape sequence a cut may have split: the next piece completes it.
_OPEN_ESCAPE = re.compile(rb"\x1b(?:\[[\x30-\x3f]*[\x20-\x2f]*|[\]P_^X][^\x07\x1b\n]*|[\x20-\x2f]*)\Z")
# Held back at a cut: at most the longest secret less one byte, plus this much of control
# sequences among them; what a hostile job interleaves beyond that is not held (memory stays bounded).
HOLD_SLACK = 4096


def mask_secrets(data: bytes, masks: list[bytes]) -> bytes:
    """`data` with each secret text (longest first, as the controller sends them) as ***,
    also where control bytes split it as a terminal shows it."""
    if not masks:
        return data
    if not _has_control(data):  # the fast path: nothing a terminal would hide
        for secret in masks:
            if secret and secret in data:
                data = data.replace(secret, MASK)
        return data
    shown = _INVISIBLE.sub(b"", data)  # in C: most such chunks (colours, progress bars) hold no secret
    if not any(secret and (secret in data or secret in shown) for secret in masks):
        return data
    spans = _spans(data, masks)
    if not spans:
        return data
    out, at = [], 0
    for start, end in spans:
        out += [data[at:start], MASK]
        at = end
    out.append(data[at:])
    return b"".join(out)


def held_tail(piece: bytes, masks: list[bytes]) -> int:
    """How many bytes at the end of a cut `piece` (its added newline left off) may begin a
    secret, as written or as a terminal shows it (with an escape sequence the cut split):
    held back until the stream's next piece comes. 0 almost always."""
    longest = max((len(s) for s in masks), default=0)
    if longest < 2 or not piece:
        return 0
    hold = _prefix_tail(piece, masks)
    window = max(0, len(piece) - longest - HOLD_SLACK)  # what can be held, and a little before it
    if _has_control(piece[window:]):
        open_escape = _OPEN_ESCAPE.search(piece, window)
        view, starts, origins = _view(piece[window : open_escape.start() if open_escape else len(piece)])
        shown = _prefix_tail(view, masks)
        if shown:
            hold = max(hold, len(piece) - window - _origin(len(view) - shown, starts, origins))
    return min(hold, longest - 1 + HOLD_SLACK)


def _has_control(data: bytes) -> bool:
    return len(data.translate(None, _CONTROLS)) != len(data)  # a C loop: ~2 ms a MiB


def _prefix_tail(data: bytes, masks: list[bytes]) -> int:
    """The length of the longest end of `data` that is a proper prefix of a secret."""
    best = 0
    for secret in masks:
        first = secret[:1]
        if not first:
            continue
        i = data.find(first, max(0, len(data) - len(secret) + 1))
        while i >= 0 and len(data) - i > best:
            if secret.startswith(data[i:]):
                best = len(data) - i
                break
            i = data.find(first, i + 1)
    return best


def _view(data: bytes) -> tuple[bytes, list[int], list[int]]:
    """What a terminal shows of `data`, with where each shown run starts in the view and in `data`."""
    parts: list[bytes] = []
    starts: list[int] = []  # each run's offset in the view
    origins: list[int] = []  # and in `data`
    shown = at = 0
    for m in _INVISIBLE.finditer(data):
        if m.start() > at:
            parts.append(data[at : m.start()])
            starts.append(shown)
            origins.append(at)
            shown += m.start() - at
        at = m.end()
    if at < len(data):
        parts.append(data[at:])
        starts.append(shown)
        origins.append(at)
    return b"".join(parts), starts, origins


def _origin(index: int, starts: list[int], origins: list[int]) -> int:
    """The offset in the data of the view's byte `index`."""
    run = bisect.bisect_right(starts, index) - 1
    return origins[run] + index - starts[run]


def _spans(data: bytes, masks: list[bytes]) -> list[tuple[int, int]]:
    """The byte ranges of `data` to mask, sorted, overlaps merged: each secret as written, and
    as shown (the range from its first shown byte to its last)."""
    view, starts, origins = _view(data)
    found: list[tuple[int, int]] = []
    for secret in masks:
        if not secret:
            continue
        found += [(i, i + len(secret)) for i in _find_all(data, secret)]
        found += [
            (_origin(i, starts, origins), _origin(i + len(secret) - 1, starts, origins) + 1)
            for i in _find_all(view, secret)
        ]
    merged: list[tuple[int, int]] = []
    for start, end in sorted(found):
        if merged and start < merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


def _find_all(data: bytes, secret: bytes) -> list[int]:
    out = []
    i = data.find(secret)
    while i >= 0:
        out.append(i)
        i = data.find(secret, i + len(secret))
    return out
