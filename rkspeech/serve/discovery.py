"""Zeroconf (mDNS) announcement of the Wyoming listener: Home Assistant's Wyoming integration
browses ``_wyoming._tcp.local.`` and offers what it finds, so nobody types an address.

The announcement is the one ``wyoming.zeroconf.HomeAssistantZeroconf`` makes (that service type,
an A record with one address, the port, no TXT properties), built here on python-zeroconf
directly because that helper can neither withdraw it nor choose interfaces: a server that stops
must send the goodbye (else Home Assistant keeps offering a dead address until the records
expire), and a listener bound to one address is announced on that interface only.  A wildcard
listener (``0.0.0.0``) is announced on every interface with the address this machine uses toward
the mDNS group (the helper's rule).  Two servers of one name on a network: the second is renamed
(``rkspeech (2)``) rather than refused, as mDNS probing allows.
"""

from __future__ import annotations

import ipaddress
import socket

from rkspeech.core.errors import MissingPackage, RkspeechError

SERVICE_TYPE = "_wyoming._tcp.local."
#: ``--zeroconf`` without a name
DEFAULT_NAME = "rkspeech"
#: the mDNS group; a UDP socket "connected" to it tells which local address reaches the LAN
MDNS_GROUP = "224.0.0.251"
WILDCARDS = ("", "0.0.0.0", "::")


def announced_address(host: str) -> str:
    """The address to announce for a listener bound to ``host``."""
    if host not in WILDCARDS:
        return host
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.connect((MDNS_GROUP, 1))  # no packet is sent: this only picks the route
        return s.getsockname()[0]
    except OSError as exc:
        raise RkspeechError(f"--zeroconf: cannot tell this machine's LAN address ({exc.strerror or exc}); "
                            "bind --wyoming to it, e.g. tcp://192.168.1.20:10300") from None
    finally:
        s.close()


class Announcement:
    """``await start()`` registers ``NAME._wyoming._tcp.local.`` -> host:port (mDNS probing takes
    about 1.2 s, measured on loopback); ``await stop()`` sends the goodbye and closes.
    :attr:`name` is the name registered (renamed on a conflict)."""

    def __init__(self, name: str, host: str, port: int):
        if not name or "." in name:
            raise RkspeechError(f"--zeroconf {name!r}: give a name without dots, e.g. {DEFAULT_NAME}")
        self.requested, self.host, self.port = name, host, port
        self.address = announced_address(host)
        self.name: str | None = None
        self._zc = self._info = None

    def service_info(self):
        from zeroconf.asyncio import AsyncServiceInfo

        ip = ipaddress.ip_address(self.address)
        family = socket.AF_INET if ip.version == 4 else socket.AF_INET6
        return AsyncServiceInfo(SERVICE_TYPE, f"{self.requested}.{SERVICE_TYPE}",
                                addresses=[socket.inet_pton(family, self.address)], port=self.port)

    async def start(self) -> None:
        try:
            from zeroconf import InterfaceChoice, IPVersion
            from zeroconf.asyncio import AsyncZeroconf
        except ImportError:
            raise MissingPackage("--zeroconf needs the zeroconf package: pip install zeroconf "
                                 "(requirements/host.txt pins it)") from None
        v6 = ipaddress.ip_address(self.address).version == 6
        interfaces = InterfaceChoice.All if self.host in WILDCARDS else [self.address]
        try:
            self._zc = AsyncZeroconf(interfaces=interfaces, ip_version=IPVersion.V6Only if v6 else IPVersion.V4Only)
            self._info = self.service_info()
            await self._zc.async_register_service(self._info, allow_name_change=True)  # probed: the name is ours
        except OSError as exc:
            await self.stop()
            raise RkspeechError(f"--zeroconf: cannot announce on {self.address} ({exc.strerror or exc})") from None
        self.name = self._info.name

    async def stop(self) -> None:
        zc, self._zc = self._zc, None
        if zc is None:
            return
        try:
            if self.name is not None:
                await (await zc.async_unregister_service(self._info))  # the goodbye sent: browsers drop it now
        finally:
            await zc.async_close()
