"""Announcing the agent on the LAN with mDNS (python-zeroconf, async API).

The TXT record carries what a controller needs before connecting: the name,
versions, the full ed25519 host key (so the first connection can already check
it) and the resources, including how many GPUs are free right now.

Interfaces are always explicit: zeroconf's default choice sends multicast out
of every interface of the machine, the real LAN one included, even where only
loopback or a test namespace was meant.
"""

import logging
import socket
from collections.abc import Awaitable
from typing import Any

import ifaddr
from zeroconf import IPVersion
from zeroconf.asyncio import AsyncServiceInfo, AsyncZeroconf

log = logging.getLogger(__name__)

SERVICE_TYPE = "_lanpool._tcp.local."


def lan_addresses() -> list[str]:
    """IPv4 addresses of this machine's non-loopback interfaces."""
    out = []
    for adapter in ifaddr.get_adapters():
        for ip in adapter.ips:
            if isinstance(ip.ip, str) and not ip.ip.startswith("127.") and not ip.ip.startswith("169.254."):
                out.append(ip.ip)
    return sorted(set(out))


def advertise_addresses(listen_host: str, requested: list[str] | None) -> list[str]:
    """Where to announce: what was asked for, else the listening address, else the LAN ones."""
    if requested:
        return requested
    if listen_host not in ("", "0.0.0.0", "::"):
        return [listen_host]
    return lan_addresses()


def txt_record(
    name: str, version: str, protocol_version: int, host_key: str, resources: dict[str, Any]
) -> dict[str, str]:
    props = {"name": name, "v": version, "pv": str(protocol_version), "hk": host_key}
    for key, value in resources.items():
        props[key] = str(value)
    return props


class Advertiser:
    """Registers one `_lanpool._tcp` service; `update()` re-announces changed TXT data."""

    def __init__(self, name: str, port: int, addresses: list[str]) -> None:
        self.name = name
        self.port = port
        self.addresses = addresses
        self._zc: AsyncZeroconf | None = None
        self._info: AsyncServiceInfo | None = None
        # Updates are announced one at a time, the latest only: zeroconf's update of a service
        # whose name is still being probed registers it early (start() then failed with
        # ServiceNameAlreadyRegistered: a job submitted in the agent's first second did that),
        # and announcements still going out for older TXT data would be heard after newer ones.
        self._registered = False
        self._updating = False
        self._pending: dict[str, str] | None = None
        self._announcing: Awaitable[object] | None = None  # the registration's announcements

    def _service_info(self, props: dict[str, str]) -> AsyncServiceInfo:
        return AsyncServiceInfo(
            SERVICE_TYPE,
            f"{self.name}.{SERVICE_TYPE}",
            addresses=[socket.inet_aton(a) for a in self.addresses],
            port=self.port,
            properties=props,
            server=f"{self.name}.local.",
        )

    async def start(self, props: dict[str, str]) -> None:
        if not self.addresses:
            log.warning("no LAN address to announce on: mDNS is off (use --mdns-interface IP)")
            return
        self._zc = AsyncZeroconf(interfaces=self.addresses, ip_version=IPVersion.V4Only)
        self._info = self._service_info(props)
        # allow_name_change: two runners on one LAN with the same name get distinct service names.
        self._announcing = await self._zc.async_register_service(self._info, allow_name_change=True)
        self._registered = True
        log.info("announced %s on %s", self._info.name, ", ".join(self.addresses))
        if self._pending is not None:  # TXT data changed while the name was probed
            await self._announce_pending()

    async def update(self, props: dict[str, str]) -> None:
        if self._zc is None or self._info is None:
            return
        self._pending = props
        if self._registered and not self._updating:  # else start() or the update going on announces it
            await self._announce_pending()

    async def _announce_pending(self) -> None:
        self._updating = True
        try:
            if self._announcing is not None:  # what they carry must not be heard after this
                announcing, self._announcing = self._announcing, None
                await announcing
            while self._pending is not None and self._zc is not None and self._info is not None:
                props, self._pending = self._pending, None
                info = self._service_info(props)
                info.name = self._info.name  # keep a name zeroconf may have changed at registration
                self._info = info
                await (await self._zc.async_update_service(info))
        finally:
            self._updating = False

    async def close(self) -> None:
        if self._zc is None:
            return
        if self._info is not None:
            # The call returns the task that sends the goodbye packets: wait for it, or
            # closing zeroconf drops them and listeners keep the runner for ~19 minutes.
            await (await self._zc.async_unregister_service(self._info))
        await self._zc.async_close()
        self._zc = None
