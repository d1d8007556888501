"""What pip would install for a job's requirements, asked before it downloads anything.

`pip install --dry-run --report -` (pip >= 22.2) resolves the requirements with the real
install's constraints and index settings and prints, as JSON, what it would install and from
where. From that the job's log gets one line, before the download, when the install would
still pull a large framework: a second torch (and its CUDA wheels) beside the base's, or any
framework download over `LARGE` bytes, with its size (a `file://` wheel's own size, an
`http(s)` one's Content-Length from a short HEAD request).

The report and its URLs come from package indexes, and the dry run may run a build backend of
the job's: all of it is untrusted. The report's size is bounded, names and versions are printed
only when they look like names and versions, a file's size is read only for a plain file anyone
may read (a forged report learns nothing of the agent's own files), and HEAD requests are few,
short and http(s) only. The forecast never holds up or fails the install: its caller logs
any error at debug level and carries on.
"""

import asyncio
import concurrent.futures
import http.client
import json
import os
import re
import stat
import urllib.parse
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from lanpool.agent.python.helper_proc import kill_and_reap

MAX_REPORT = 32 * 1024 * 1024  # a report holds each package's metadata (its README too): big, not unbounded
MAX_PACKAGES = 5000
LARGE = 100 * 1000 * 1000  # a framework download this big is worth a line even with no copy in the base
HEAD_TIMEOUT_S = 3.0
SIZES_DEADLINE_S = 8.0  # all the sizes together: past it a size is "unknown", the install starts
MAX_HEADS = 64
_HEAD_WORKERS = 8

# Packages that are (part of) a deep-learning framework: big, CUDA-bound, and trouble when a
# second copy shadows the base's.
FRAMEWORKS = frozenset(
    {
        "torch",
        "torchvision",
        "torchaudio",
        "torchtext",
        "triton",
        "pytorch-triton",
        "xformers",
        "flash-attn",
        "tensorflow",
        "tensorflow-cpu",
        "tensorflow-gpu",
        "tensorflow-intel",
        "tf-nightly",
        "jax",
        "jaxlib",
        "paddlepaddle",
        "paddlepaddle-gpu",
        "mxnet",
        "onnxruntime-gpu",
        "lightning",
        "pytorch-lightning",
        "lightning-fabric",
    }
)
_CUDA_PREFIXES = ("nvidia-", "jax-cuda", "cupy-cuda")
_CUDA = frozenset({"triton", "pytorch-triton"})
# Small on their own: said only when they would shadow the base's copy at another version.
_LIGHT = frozenset({"lightning", "pytorch-lightning", "lightning-fabric"})

_NAME = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,98}[a-z0-9])?")
_VERSION = re.compile(r"[A-Za-z0-9.+!_-]{1,64}")
_REQUIRES_NAME = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]{0,99})")


class ReportError(ValueError):
    """The dry run or its report is not usable (said in the agent's debug log only)."""


@dataclass(frozen=True)
class Planned:
    """One package the install would download and install."""

    name: str  # canonical (PEP 503), checked
    version: str  # checked
    url: str  # where pip would fetch it from ("" when the report did not say)
    requested: bool  # named by the requirements file itself
    requires: tuple[str, ...]  # canonical names of what it depends on (for the hint)


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def is_framework(name: str) -> bool:
    return name in FRAMEWORKS or name.startswith(_CUDA_PREFIXES)


def supports_report(pip_version: str) -> bool:
    """Whether this pip has `install --report` (22.2 and later)."""
    found = re.match(r"(\d+)\.(\d+)", pip_version)
    return found is not None and (int(found[1]), int(found[2])) >= (22, 2)


async def dry_run(argv: list[str], cwd: str, env: dict[str, str], timeout_s: float) -> bytes:
    """pip's report (stdout, bounded) of `argv`, a `pip install --dry-run --report -`; its other
    output is dropped (the real install says the same). Killed with its group when it runs over,
    writes too much, or the start is cancelled."""
    proc = await asyncio.create_subprocess_exec(
        *argv,
        cwd=cwd,
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        start_new_session=True,
    )
    assert proc.stdout is not None
    chunks: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(timeout_s):
            while chunk := await proc.stdout.read(1 << 16):
                size += len(chunk)
                if size > MAX_REPORT:
                    raise ReportError(f"pip's report is over {MAX_REPORT >> 20} MiB")
                chunks.append(chunk)
            code = await proc.wait()
    finally:
        if proc.returncode is None:
            await kill_and_reap(proc)
    if code != 0:
        raise ReportError(f"pip's dry run exited {code}")
    return b"".join(chunks)


def read_report(data: bytes) -> list[Planned]:
    """The packages of a `pip install --report` (ReportError when it is not one); an entry whose
    name or version does not look like one is left out."""
    if len(data) > MAX_REPORT:
        raise ReportError("the report is too big")
    try:
        report = json.loads(data)
    except (ValueError, RecursionError) as exc:  # RecursionError: nesting deep enough to exhaust the parser
        raise ReportError(f"the report is not JSON: {str(exc)[:100]}") from None
    install = report.get("install") if isinstance(report, dict) else None
    if not isinstance(install, list):
        raise ReportError("the report has no install list")
    planned: list[Planned] = []
    for item in install[:MAX_PACKAGES]:
        found = _planned(item)
        if found is not None:
            planned.append(found)
    return planned


def _planned(item: Any) -> Planned | None:
    if not isinstance(item, dict):
        return None
    metadata = item.get("metadata")
    if not isinstance(metadata, dict):
        return None
    name, version = metadata.get("name"), metadata.get("version")
    if not isinstance(name, str) or not isinstance(version, str) or len(name) > 100:
        return None
    name = canonical(name)
    if not _NAME.fullmatch(name) or not _VERSION.fullmatch(version):
        return None
    info = item.get("download_info")
    url = info.get("url") if isinstance(info, dict) else None
    url = url if isinstance(url, str) and len(url) <= 4096 else ""
    requires: list[str] = []
    listed = metadata.get("requires_dist")
    for req in listed[:500] if isinstance(listed, list) else []:
        found = _REQUIRES_NAME.match(req) if isinstance(req, str) else None
        if found:
            requires.append(canonical(found[1]))
    return Planned(name, version, url, item.get("requested") is True, tuple(requires))


def size_of(url: str) -> int | None:
    """The download's size in bytes, None when it cannot be told: a plain `file://` file anyone
    may read, or an http(s) HEAD's Content-Length."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme == "file":
        try:
            st = os.stat(urllib.request.url2pathname(parts.path))
        except (OSError, ValueError):
            return None
        # A forged report could name the agent's own files: their sizes are nobody's business.
        return st.st_size if stat.S_ISREG(st.st_mode) and st.st_mode & stat.S_IROTH else None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    request = urllib.request.Request(urllib.parse.urlunsplit(parts._replace(fragment="")), method="HEAD")
    try:
        with _opener().open(request, timeout=HEAD_TIMEOUT_S) as response:
            length = response.headers.get("Content-Length", "")
    except (OSError, ValueError, http.client.HTTPException):  # URLError, HTTPError, timeouts, bad replies
        return None
    return int(length) if length.isdigit() and len(length) <= 15 else None


class _KeepHead(urllib.request.HTTPRedirectHandler):
    """urllib turns a redirected HEAD into a GET (a download of the file): this keeps it a HEAD,
    and follows http(s) only."""

    def redirect_request(
        self, req: urllib.request.Request, fp: Any, code: int, msg: str, headers: Any, newurl: str
    ) -> urllib.request.Request | None:
        if urllib.parse.urlsplit(newurl).scheme not in ("http", "https"):
            return None
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None:
            new.method = req.get_method()
        return new


def _opener() -> urllib.request.OpenerDirector:
    return urllib.request.build_opener(_KeepHead())


def sizes_of(urls: Sequence[str]) -> list[int | None]:
    """`size_of` each, a few at a time, all within SIZES_DEADLINE_S (later ones: None)."""
    pool = concurrent.futures.ThreadPoolExecutor(_HEAD_WORKERS, thread_name_prefix="lanpool-pip-size")
    try:
        futures = [pool.submit(size_of, url) if i < MAX_HEADS else None for i, url in enumerate(urls)]
        concurrent.futures.wait([f for f in futures if f is not None], timeout=SIZES_DEADLINE_S)
        return [f.result() if f is not None and f.done() and not f.exception() else None for f in futures]
    finally:
        pool.shutdown(wait=False, cancel_futures=True)  # a HEAD still waiting ends by its own timeout


def human_size(size: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} B"


async def forecast(planned: list[Planned], base: dict[str, str], hold_base: bool) -> str | None:
    """The log line for a large framework download (None: nothing worth saying). `base`: the
    base's distributions, canonical name -> version."""
    counted = [
        p for p in planned if is_framework(p.name) and (p.name not in _LIGHT or p.name in base)
    ]  # Lightning alone is small: it counts only as a second copy of the base's
    if not counted:
        return None
    shadows = [p for p in counted if p.name in base and base[p.name].lower() != p.version.lower()]
    sizes = await asyncio.to_thread(sizes_of, [p.url for p in counted])
    known = sum(s for s in sizes if s is not None)
    if not shadows and known < LARGE:
        return None
    unknown = sum(1 for s in sizes if s is None)
    if unknown == len(sizes):
        size = "size unknown"
    else:
        size = human_size(known) + (f", {unknown} size{'s' if unknown != 1 else ''} unknown" if unknown else "")
    main = [p for p in counted if not _is_cuda(p.name)]
    cuda = len(counted) - len(main)
    what = _names(
        [f"{p.name} {p.version}" for p in main], f"{cuda} CUDA wheel{'s' if cuda != 1 else ''}" if cuda else ""
    )
    text = f"would install {what} ({size})"
    shadowed = [p for p in shadows if not _is_cuda(p.name)]
    if shadows:
        text += " beside the base's " + (
            _names([f"{p.name} {base[p.name]}" for p in shadowed]) if shadowed else "CUDA wheels"
        )
    hints = [] if hold_base or not shadows else ["`hold_base: false` lets them change"]
    if shadowed:
        hints.append(_keep_hint(shadowed, planned, base))
    return text + (f" ({'; '.join(hints)})" if hints else "")


def _is_cuda(name: str) -> bool:
    return name in _CUDA or name.startswith(_CUDA_PREFIXES)


def _names(items: list[str], tail: str = "", most: int = 4) -> str:
    """`a, b and c`; past `most` of them `a, b, c, d and 3 more`; `tail` (`19 CUDA wheels`) last."""
    if len(items) > most:
        items = [*items[:most], f"{len(items) - most} more"]
    items = [*items, tail] if tail else items
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _keep_hint(shadowed: list[Planned], planned: list[Planned], base: dict[str, str]) -> str:
    """What keeps the base's copy: pinning what pulls a second one in (torchvision, for torch),
    what the requirements file names first; else the framework itself."""
    for shadow in shadowed:
        pullers = [p for p in planned if shadow.name in p.requires and p.name != shadow.name]
        pullers.sort(key=lambda p: not p.requested)
        if pullers and not shadow.requested:
            return f"pin {pullers[0].name} to a release for {shadow.name} {base[shadow.name]} to keep the base's"
    return f"pin {shadowed[0].name}=={base[shadowed[0].name]} to keep the base's"
