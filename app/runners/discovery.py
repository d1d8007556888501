"""Finding runners on the LAN: browsing `_lanpool._tcp` with python-zeroconf.

Interfaces are always explicit (LANPOOL_MDNS_INTERFACES, or the machine's LAN
addresses): zeroconf's "all interfaces" default is never used.
"""

import asyncio
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field

import ifaddr
from zeroconf import IPVersion, ServiceStateChange, Zeroconf
from zeroconf.asyncio import AsyncServiceBrowser, AsyncServiceInfo, AsyncZeroconf

from lanpool.app.runners.views import bounded_props

log = logging.getLogger(__name__)

SERVICE_TYPE = "_lanpool._tcp.local."
RESOLVE_TIMEOUT_MS = 3000


@dataclass(frozen=True)
class Advert:
    """What a runner announces: enough to connect and to check its host key."""

    name: str
    host: str
    port: int
    host_key: str
    props: dict[str, str] = field(default_factory=dict)
    service: str = ""


def browse_interfaces() -> list[str]:
    env = os.environ.get("LANPOOL_MDNS_INTERFACES", "").strip()
    if env:
        return [i.strip() for i in env.split(",") if i.strip()]
    out = []
    for adapter in ifaddr.get_adapters():
        for ip in adapter.ips:
            if isinstance(ip.ip, str) and not ip.ip.startswith(("127.", "169.254.")):
                out.append(ip.ip)
    return sorted(set(out))


def _advert(info: AsyncServiceInfo) -> Advert | None:
    # Anyone can announce: what is kept is bounded here, and checked in app/runners/adverts.py.
    props = bounded_props(info.decoded_properties)
    addresses = info.parsed_addresses(IPVersion.V4Only)
    if not addresses or not info.port or not props.get("hk"):
        log.info("ignored the incomplete mDNS advert %s", info.name[:200])
        return None
    return Advert(
        name=props.get("name") or info.name.split(".")[0],
        host=addresses[0],
        port=info.port,
        host_key=props["hk"],
        props=props,
        service=info.name,
    )


class Browser:
    """Keeps browsing; calls `on_seen(advert)` for each new or updated runner and
    `on_gone(service_name)` when one unregisters."""

    def __init__(
        self, interfaces: list[str], on_seen: Callable[[Advert], None], on_gone: Callable[[str], object] | None = None
    ) -> None:
        self.interfaces = interfaces
        self._on_seen = on_seen
        self._on_gone = on_gone or (lambda _name: None)
        self._zc: AsyncZeroconf | None = None
        self._browser: AsyncServiceBrowser | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        if not self.interfaces:
            log.info("no LAN interface to browse on; mDNS discovery is off")
            return
        self._zc = AsyncZeroconf(interfaces=self.interfaces, ip_version=IPVersion.V4Only)
        self._browser = AsyncServiceBrowser(self._zc.zeroconf, [SERVICE_TYPE], handlers=[self._on_change])

    def _on_change(self, zeroconf: Zeroconf, service_type: str, name: str, state_change: ServiceStateChange) -> None:
        if state_change is ServiceStateChange.Removed:
            self._on_gone(name)
            return
        task = asyncio.ensure_future(self._resolve(name))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _resolve(self, name: str) -> None:
        assert self._zc is not None
        info = AsyncServiceInfo(SERVICE_TYPE, name)
        if not await info.async_request(self._zc.zeroconf, RESOLVE_TIMEOUT_MS):
            log.info("could not resolve %s", name)
            return
        try:
            advert = _advert(info)
        except (ValueError, TypeError, UnicodeError) as exc:  # a malformed record: never the end of discovery
            log.warning("ignored the unreadable mDNS advert %s: %s", name[:200], exc)
            return
        if advert is not None:
            self._on_seen(advert)

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        if self._browser is not None:
            await self._browser.async_cancel()
        if self._zc is not None:
            await self._zc.async_close()
        self._zc = self._browser = None


async def discover(interfaces: list[str], wait_s: float) -> list[Advert]:
    """Browse for `wait_s` seconds and return what answered (latest advert per service)."""
    found: dict[str, Advert] = {}
    browser = Browser(interfaces, lambda a: found.__setitem__(a.service, a), lambda n: found.pop(n, None))
    await browser.start()
    try:
        await asyncio.sleep(wait_s)
    finally:
        await browser.close()
    return list(found.values())
