"""The HTTP client of a crawl, and the connection guard a URL policy needs.

Checking a URL's host before the request is not enough against DNS rebinding: the name
can resolve to a public address for the check and to 127.0.0.1 for the connection. With
a policy that refuses private addresses, connections are therefore opened by a guarded
network backend, which resolves the host once, refuses non-public addresses (unless the
policy names the host) and connects to the address it checked. It plugs into httpcore's
connection pool, an internal of httpx; if that internal ever changes, the guard is
skipped with a warning and the per-request check still applies. A user's crawl keeps the
environment's HTTP proxies: the proxy resolves names then, so only the per-request check
applies.
"""

from __future__ import annotations

import functools
import logging
import urllib.request
from typing import TYPE_CHECKING, Any

from knowledge_agent.crawl.decode import ACCEPT_ENCODING
from knowledge_agent.crawl.fetch import POLICY_REFUSAL
from knowledge_agent.crawl.options import CrawlOptions
from knowledge_agent.crawl.policy import UrlPolicy, is_public_address

if TYPE_CHECKING:
    import httpx

__all__ = ["ACCEPT", "make_client"]

logger = logging.getLogger(__name__)

ACCEPT = (
    "text/html,application/xhtml+xml,text/markdown;q=0.9,text/x-rst;q=0.9,"
    "text/plain;q=0.8,application/pdf;q=0.8,application/xml;q=0.5,*/*;q=0.1"
)


def make_client(
    options: CrawlOptions,
    *,
    policy: UrlPolicy,
    transport: httpx.BaseTransport | None,
) -> httpx.Client:
    """One ``httpx.Client`` for all the crawl's threads: HTTP/1.1, no automatic redirects,
    the crawl's timeout, user agent and headers, and the connection guard ``policy``
    needs."""
    import httpx

    limits = httpx.Limits(
        max_connections=options.concurrency, max_keepalive_connections=options.concurrency
    )
    proxied = policy.honour_proxies and bool(urllib.request.getproxies())
    if transport is None and policy.checks_addresses and not proxied:
        # Our own transport: environment proxies would resolve names where we cannot check.
        transport = httpx.HTTPTransport(limits=limits, http2=False)
        _guard(transport, policy)
    return httpx.Client(
        headers=_headers(options),
        timeout=httpx.Timeout(options.timeout),
        follow_redirects=False,
        limits=limits,
        http2=False,
        transport=transport,
    )


def _headers(options: CrawlOptions) -> list[tuple[str, str]]:
    extra = {name.lower() for name, _ in options.headers}
    headers = [
        (name, value)
        for name, value in (("User-Agent", options.user_agent), ("Accept", ACCEPT))
        if name.lower() not in extra
    ]
    # The body decoder undoes gzip and deflate only: a coding asked for in the options
    # (br, zstd) could not be read, so the crawler's own Accept-Encoding always goes.
    own = [(name, value) for name, value in options.headers if name.lower() != "accept-encoding"]
    if len(own) < len(options.headers):
        logger.warning("the crawler sets Accept-Encoding itself; the header option is ignored")
    return [*headers, *own, ("Accept-Encoding", ACCEPT_ENCODING)]


def _guard(transport: httpx.HTTPTransport, policy: UrlPolicy) -> None:
    import httpcore

    pool = getattr(transport, "_pool", None)
    if not isinstance(pool, httpcore.ConnectionPool) or not hasattr(pool, "_network_backend"):
        logger.warning("cannot guard connections with this httpcore; checking URLs only")
        return
    pool._network_backend = _guarded_backend_class()(pool._network_backend, policy)


@functools.lru_cache(maxsize=1)
def _guarded_backend_class() -> type:
    # Built on first use: httpcore (like httpx) is imported only when a crawl runs.
    import httpcore

    class GuardedBackend(httpcore.NetworkBackend):
        """Connects only to addresses the policy allows, and to the very address checked."""

        def __init__(self, inner: httpcore.NetworkBackend, policy: UrlPolicy) -> None:
            self._inner = inner
            self._policy = policy

        def connect_tcp(
            self,
            host: str,
            port: int,
            timeout: float | None = None,
            local_address: str | None = None,
            socket_options: Any = None,
        ) -> httpcore.NetworkStream:
            if self._policy.names_host(host.lower()):
                return self._inner.connect_tcp(host, port, timeout, local_address, socket_options)
            try:
                addresses = self._policy.resolve(host)
            except OSError as exc:
                raise httpcore.ConnectError(str(exc)) from exc
            for address in addresses:
                if not is_public_address(address):
                    reason = f"host {host} is a private or reserved address ({address})"
                    raise httpcore.ConnectError(POLICY_REFUSAL + reason)
            if not addresses:
                raise httpcore.ConnectError(f"{host} does not resolve")
            error: Exception | None = None
            for address in addresses:
                try:
                    return self._inner.connect_tcp(
                        address, port, timeout, local_address, socket_options
                    )
                except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                    error = exc
            assert error is not None
            raise error

        def connect_unix_socket(
            self, path: str, timeout: float | None = None, socket_options: Any = None
        ) -> httpcore.NetworkStream:
            raise httpcore.ConnectError("unix sockets are not allowed by the URL policy")

        def sleep(self, seconds: float) -> None:
            self._inner.sleep(seconds)

    return GuardedBackend
