"""Who may talk to the MCP server over HTTP: requests addressed to this server, from no other
web site, carrying its bearer token when it has one.

:class:`RequestGuard` sits in front of the MCP application and answers, before any of a
request's body is read:

- ``421`` when the ``Host`` header names another host than this server (DNS rebinding: a
  page on another site whose name resolves to this machine sends its own name): allowed
  are the address the connection arrived at, the host the server was bound to, this
  machine's name when other machines may connect, and ``localhost`` when loopback may;
- ``403`` when an ``Origin`` header (a browser's) names another host;
- ``401`` when the server has a token and ``Authorization: Bearer <token>`` does not carry
  it (compared in constant time).
"""

from __future__ import annotations

import hmac
import ipaddress
import socket
from collections.abc import Iterable
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from knowledge_agent.crawl.policy import is_loopback
from knowledge_agent.errors import ConfigError

__all__ = ["MIN_TOKEN_CHARS", "RequestGuard", "check_token", "server_names"]

MIN_TOKEN_CHARS = 16
"""Shortest bearer token accepted: a shorter one could be guessed over the network."""

_LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")


def check_token(token: object, where: str) -> str:
    """``token`` if it can be a bearer token (at least :data:`MIN_TOKEN_CHARS` visible
    ASCII characters, what an ``Authorization`` header carries as is); else a
    ``ConfigError`` naming ``where`` it came from, never the token."""
    if not isinstance(token, str) or not token.strip():
        raise ConfigError(f"{where} is empty or not set: it must hold the server's bearer token")
    if len(token) < MIN_TOKEN_CHARS or not all("!" <= char <= "~" for char in token):
        raise ConfigError(
            f"{where} must be a bearer token of at least {MIN_TOKEN_CHARS} visible ASCII "
            'characters (no spaces), e.g. one from `python -c "import secrets; '
            'print(secrets.token_urlsafe(32))"`'
        )
    return token


def _address(name: str) -> str:
    """A host name lower-cased, or an IP address in its one spelling (an IPv4 address
    mapped into IPv6 as the IPv4 address)."""
    name = name.strip().strip("[]").lower().rstrip(".")
    try:
        ip = ipaddress.ip_address(name.split("%")[0])
    except ValueError:
        return name
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return str(ip)


def _host_of(header: str) -> str | None:
    """The host a ``Host`` header names (without its port); None when it is malformed."""
    value = header.strip()
    if value.startswith("["):
        end = value.find("]")
        rest = value[end + 1 :] if end > 0 else "x"
        if rest and not (rest.startswith(":") and rest[1:].isdigit()):
            return None
        return _address(value[1:end])
    name, colon, port = value.rpartition(":")
    if not colon:
        return _address(value) if value else None
    if not port.isdigit() or not name or ":" in name:
        return None
    return _address(name)


def server_names(host: str) -> frozenset[str]:
    """The host names and addresses a client may put in ``Host`` for a server bound to
    ``host``, besides the address each connection arrives at: that host; the loopback
    names when loopback clients can connect (``host`` is loopback or a wildcard such as
    ``0.0.0.0``); this machine's name when other machines can (no DNS lookup: it could
    hang)."""
    names = {_address(host)}
    wildcard = _address(host) in ("0.0.0.0", "::")
    if is_loopback(host) or wildcard:
        names.update(_LOOPBACK_NAMES)
    if not is_loopback(host) and socket.gethostname():
        names.add(_address(socket.gethostname()))
    return frozenset(names)


class RequestGuard:
    """An ASGI middleware that lets through only requests addressed to this server, from
    no other site, with the bearer token when ``token`` is set (see the module)."""

    def __init__(self, app: ASGIApp, *, names: Iterable[str], token: str | None) -> None:
        self.app = app
        self._names = frozenset(_address(name) for name in names)
        self._token = None if token is None else token.encode("ascii")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # the lifespan: the server's own start and stop
            await self.app(scope, receive, send)
            return
        refusal = self._refusal(scope)
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def _refusal(self, scope: Scope) -> Response | None:
        headers = Headers(scope=scope)
        allowed = self._allowed_hosts(scope)
        if _host_of(headers.get("host", "")) not in allowed:
            return Response("Invalid Host header", status_code=421)
        origin = headers.get("origin")
        if origin is not None and not _origin_allowed(origin, allowed):
            return Response("Invalid Origin header", status_code=403)
        if self._token is not None and not self._authorized(headers.get("authorization")):
            return Response(
                "Unauthorized: send the server's token as Authorization: Bearer <token>",
                status_code=401,
                headers={"WWW-Authenticate": 'Bearer realm="knowledge-agent"'},
            )
        return None

    def _allowed_hosts(self, scope: Scope) -> frozenset[str]:
        arrived = scope.get("server")
        if not arrived:
            return self._names
        return self._names | {_address(str(arrived[0]))}

    def _authorized(self, header: str | None) -> bool:
        scheme, _, given = (header or "").strip().partition(" ")
        if scheme.lower() != "bearer":
            return False
        # Headers arrive decoded as Latin-1: encoded back, any bytes compare (unequal).
        return hmac.compare_digest(given.strip().encode("latin-1"), self._token or b"")


def _origin_allowed(origin: str, allowed: frozenset[str]) -> bool:
    try:
        parts = urlsplit(origin)
        parts.port  # noqa: B018 - a malformed port raises here
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and _address(parts.hostname or "") in allowed
