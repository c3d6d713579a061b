"""Which URLs an untrusted caller may make the crawler fetch.

The MCP server lets an agent ask for a crawl; without a policy that agent could read the
cloud metadata service (169.254.169.254) or an admin page on localhost (server-side
request forgery). :class:`UrlPolicy` allows URLs under given prefixes and refuses hosts
that are or resolve to non-public addresses unless a prefix names that host itself.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

from knowledge_agent.crawl.urls import normalize_url

__all__ = ["UrlPolicy", "default_resolver", "is_loopback", "is_public_address"]

Resolver = Callable[[str], list[str]]


def default_resolver(host: str) -> list[str]:
    """Every address ``host`` resolves to (``socket.getaddrinfo``), as strings."""
    infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    addresses: list[str] = []
    for info in infos:
        address = str(info[4][0]).split("%")[0]  # an IPv6 scope id is no part of the address
        if address not in addresses:
            addresses.append(address)
    return addresses


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine only: ``localhost`` or a loopback address."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def is_public_address(address: str) -> bool:
    """Whether ``address`` is a globally routable unicast address.

    Not public: private, loopback, link-local, reserved, multicast, unspecified, and the
    other special ranges ``ipaddress`` does not call global (carrier-grade NAT, where some
    clouds put their metadata service). An IPv6 address that embeds an IPv4 one is judged
    by that IPv4 address. Something that is not an address at all is not public.
    """
    try:
        ip = ipaddress.ip_address(address.split("%")[0])
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address):
        embedded = ip.ipv4_mapped or ip.sixtofour or (ip.teredo[1] if ip.teredo else None)
        if embedded is not None:
            ip = embedded
    special = (
        ip.is_private
        or ip.is_loopback
        or ip.is_link_local
        or ip.is_reserved
        or ip.is_multicast
        or ip.is_unspecified
    )
    return not special and ip.is_global


@dataclass(frozen=True)
class UrlPolicy:
    """URLs allowed: under one of ``allowed_prefixes``, on a public address unless the
    matching prefix names the host (``http://127.0.0.1:8000/`` allows that server;
    ``http://`` allows every public http URL and no private one).

    ``resolver`` maps a host name to its addresses (``socket.getaddrinfo`` by default;
    tests inject one).
    """

    allowed_prefixes: tuple[str, ...]
    resolver: Resolver | None = None

    def __post_init__(self) -> None:
        if isinstance(self.allowed_prefixes, str):
            object.__setattr__(self, "allowed_prefixes", (self.allowed_prefixes,))
        else:
            object.__setattr__(self, "allowed_prefixes", tuple(self.allowed_prefixes))

    def refusal(self, url: str) -> str | None:
        """``None`` when ``url`` may be fetched, else the reason it may not."""
        try:
            normalized = normalize_url(url)
        except ValueError as exc:
            return str(exc)
        host = urlsplit(normalized).hostname or ""
        matching = [p for p in self._prefixes() if normalized.startswith(p)]
        if not matching:
            return f"{normalized} is not under an allowed URL prefix"
        if any(_prefix_host(prefix) == host for prefix in matching):
            return None
        return self.address_refusal(host)

    def names_host(self, host: str) -> bool:
        """Whether one of the prefixes names ``host`` itself (so it may be private)."""
        return any(_prefix_host(prefix) == host for prefix in self._prefixes())

    def address_refusal(self, host: str) -> str | None:
        """Why ``host`` may not be fetched from on address grounds (``None``: it may)."""
        try:
            addresses = self.resolve(host)
        except (OSError, UnicodeError) as exc:
            return f"host {host} does not resolve ({exc})"
        if not addresses:
            return f"host {host} does not resolve"
        for address in addresses:
            if not is_public_address(address):
                return f"host {host} is a private or reserved address ({address})"
        return None

    def resolve(self, host: str) -> list[str]:
        """The addresses of ``host``: itself when it is an IP literal, else resolved."""
        bare = host.strip("[]")
        try:
            return [str(ipaddress.ip_address(bare))]
        except ValueError:
            pass
        return list((self.resolver or default_resolver)(bare))

    def _prefixes(self) -> tuple[str, ...]:
        return tuple(_normalize_prefix(prefix) for prefix in self.allowed_prefixes)


def _normalize_prefix(prefix: str) -> str:
    """A prefix in the spelling :func:`normalize_url` gives URLs.

    A prefix that is a full URL is normalised (``https://docs.x.com`` becomes
    ``https://docs.x.com/``, so it cannot match ``https://docs.x.com.evil.net``); a bare
    scheme such as ``https://`` is only lower-cased.
    """
    try:
        return normalize_url(prefix)
    except ValueError:
        return prefix.strip().lower()


def _prefix_host(prefix: str) -> str | None:
    try:
        return urlsplit(normalize_url(prefix)).hostname
    except ValueError:
        return None
