"""Which URLs a crawl may fetch: one check for every request and every hop.

The MCP server lets an agent ask for a crawl; without a policy that agent could read the
cloud metadata service (169.254.169.254) or an admin page on localhost (server-side
request forgery). :class:`UrlPolicy` allows URLs under given prefixes (each a folder) and
refuses hosts that are or resolve to non-public addresses unless a prefix names that host
itself. A user's own crawl gets :meth:`UrlPolicy.for_user`: any http(s) URL, but a hostile
page cannot redirect or link it to a private address other than the host the user named.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import SplitResult, urlsplit

from knowledge_agent.crawl.urls import normalize_url
from knowledge_agent.errors import ConfigError

__all__ = ["UrlPolicy", "default_resolver", "is_loopback", "is_public_address"]

Resolver = Callable[[str], list[str]]

# %2F, %5C, %252F, %255C ... and %252E: what a server decoding once or twice reads as a
# separator or a dot (normalize_url already decodes %2E itself and resolves the dots).
_ENCODED_SEPARATOR = re.compile(r"%(?:25)*(?:2F|5C)|%(?:25)+2E", re.IGNORECASE)


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

    A prefix is a folder, not a string start: ``https://h/docs`` allows ``/docs`` and
    ``/docs/x`` but not ``/docs-private``. Under a prefix with a folder, a path holding an
    encoded ``/`` or ``\\`` (``%2F``, ``%5C``) or a ``..;`` segment is refused: a server
    that decodes it before resolving dot segments would serve what lies outside. Dot
    segments are resolved before the check. A prefix that is neither an http(s) URL nor a
    bare ``http://`` / ``https://`` raises :class:`~knowledge_agent.errors.ConfigError`.

    ``private_hosts`` may be private though no prefix names them (a user's start host);
    ``allow_private`` lifts the address rule altogether. ``honour_proxies`` lets a crawl
    use the environment's HTTP proxies (the proxy then resolves names, so only the
    per-request check applies). ``resolver`` maps a host name to its addresses
    (``socket.getaddrinfo`` by default; tests inject one).
    """

    allowed_prefixes: tuple[str, ...]
    resolver: Resolver | None = None
    private_hosts: tuple[str, ...] = ()
    allow_private: bool = False
    honour_proxies: bool = False
    _parsed: tuple[_Prefix, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        prefixes = self.allowed_prefixes
        prefixes = (prefixes,) if isinstance(prefixes, str) else tuple(prefixes)
        object.__setattr__(self, "allowed_prefixes", prefixes)
        object.__setattr__(self, "private_hosts", tuple(h.lower() for h in self.private_hosts))
        object.__setattr__(self, "_parsed", tuple(_Prefix.parse(p) for p in prefixes))

    @classmethod
    def for_user(
        cls, start_url: str, *, allow_private: bool = False, resolver: Resolver | None = None
    ) -> UrlPolicy:
        """The policy of a crawl the user asked for: every http(s) URL, on a public address
        or on the host of ``start_url`` (``allow_private``: on any address)."""
        try:
            host = urlsplit(normalize_url(start_url)).hostname or ""
        except ValueError as exc:
            raise ConfigError(f"cannot crawl {start_url!r}: {exc}") from exc
        return cls(
            ("http://", "https://"),
            resolver=resolver,
            private_hosts=(host,),
            allow_private=allow_private,
            honour_proxies=True,
        )

    @property
    def checks_addresses(self) -> bool:
        """Whether some hosts are refused for their address (so connections need a guard)."""
        return not self.allow_private

    def refusal(self, url: str) -> str | None:
        """``None`` when ``url`` may be fetched, else the reason it may not."""
        try:
            normalized = normalize_url(url)
        except ValueError as exc:
            return str(exc)
        parts = urlsplit(normalized)
        matching = [prefix for prefix in self._parsed if prefix.holds(parts)]
        if not matching:
            reason = f"{normalized} is not under an allowed URL prefix"
            if _escapes_folder(parts.path):
                reason += " (an encoded / or \\ or a '..;' segment never is under a folder)"
            return reason
        return self._host_refusal(parts.hostname or "", matching)

    def robots_refusal(self, url: str) -> str | None:
        """Like :meth:`refusal`, for a hop of a robots.txt request: also allowed is exactly
        ``<origin>/robots.txt`` for an origin an allowed prefix lies in (on an allowed
        address). Every hop is checked, so a redirect must land on such a URL or under a
        prefix."""
        try:
            normalized = normalize_url(url)
        except ValueError as exc:
            return str(exc)
        parts = urlsplit(normalized)
        if parts.path == "/robots.txt" and not parts.query:
            origins = [prefix for prefix in self._parsed if prefix.holds_origin(parts)]
            if origins:
                return self._host_refusal(parts.hostname or "", origins)
        return self.refusal(normalized)

    def names_host(self, host: str) -> bool:
        """Whether ``host`` may be private: a prefix or ``private_hosts`` names it."""
        host = host.lower()
        return host in self.private_hosts or any(p.host == host for p in self._parsed)

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

    def _host_refusal(self, host: str, prefixes: list[_Prefix]) -> str | None:
        if self.allow_private or host in self.private_hosts:
            return None
        if any(prefix.host == host for prefix in prefixes):
            return None
        return self.address_refusal(host)


@dataclass(frozen=True)
class _Prefix:
    """One allowed prefix: a bare scheme (``netloc`` None) or a folder of one origin."""

    scheme: str
    netloc: str | None = None
    host: str | None = None
    folder: str = ""  # the path without its trailing slash; "" for the whole origin
    query: str | None = None  # a prefix with a query holds that path with such queries

    @classmethod
    def parse(cls, text: str) -> _Prefix:
        if not isinstance(text, str):
            raise ConfigError(f"allowed URL prefix {text!r} is not a string")
        bare = text.strip().lower()
        if bare in ("http://", "https://"):
            return cls(bare[:-3])
        try:
            parts = urlsplit(normalize_url(text))
        except ValueError as exc:
            raise ConfigError(f"allowed URL prefix {text!r} is not an http(s) URL: {exc}") from exc
        return cls(
            parts.scheme,
            parts.netloc,
            parts.hostname,
            parts.path.rstrip("/"),
            parts.query or None,
        )

    def holds_origin(self, parts: SplitResult) -> bool:
        return parts.scheme == self.scheme and self.netloc in (None, parts.netloc)

    def holds(self, parts: SplitResult) -> bool:
        """Whether the normalised URL split into ``parts`` lies in this prefix."""
        if not self.holds_origin(parts):
            return False
        if self.query is not None:
            return parts.path.rstrip("/") == self.folder and parts.query.startswith(self.query)
        if not self.folder:
            return True
        if _escapes_folder(parts.path):
            return False
        return parts.path == self.folder or parts.path.startswith(self.folder + "/")


def _escapes_folder(path: str) -> bool:
    """Whether ``path`` (normalised: dot segments resolved) could mean another folder to
    a server: an encoded slash or backslash (also encoded twice, for servers that decode
    twice), a dot encoded twice, or a ``..;`` / ``.;`` segment (servlet containers drop
    the ``;`` part and then resolve the dots)."""
    if _ENCODED_SEPARATOR.search(path):
        return True
    return any(segment.split(";", 1)[0] in (".", "..") for segment in path.split("/"))
