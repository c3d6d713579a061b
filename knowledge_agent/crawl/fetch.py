"""One GET, with everything that can go wrong with it turned into a :class:`CrawlFailure`.

:class:`Fetcher` follows redirects itself, so that the URL policy, robots.txt, the
crawl's scope and the loop check see every hop; it streams bodies so an unwanted type or
an oversized page costs no download; it decodes gzip and deflate itself, a step at a
time, so the size cap holds on decoded bytes; each hop has a total deadline, from
connecting to the last body byte; and it maps every transport error to a reason a person
can read. Nothing here raises for a per-URL problem except :class:`Stopped`.
"""

from __future__ import annotations

import logging
import mimetypes
import socket
import ssl
import threading
import time
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Protocol
from urllib.parse import urlsplit

from knowledge_agent.crawl.decode import Decoder
from knowledge_agent.crawl.results import CrawlFailure, KnownPage
from knowledge_agent.crawl.urls import normalize_url, url_key
from knowledge_agent.errors import ConfigError
from knowledge_agent.extras import missing_extra
from knowledge_agent.processors.encoding import binary_problem

if TYPE_CHECKING:
    import httpx

__all__ = [
    "PAGE_TYPES",
    "POLICY_REFUSAL",
    "SITEMAP_TYPES",
    "BodySink",
    "Fetcher",
    "Response",
    "Stopped",
    "Throttle",
    "describe_error",
    "format_seconds",
    "parse_content_type",
    "require_httpx",
    "sniff_bytes",
    "sniff_suffix",
    "timed_out",
]

logger = logging.getLogger(__name__)

PAGE_TYPES = frozenset(
    {
        "text/html",
        "application/xhtml+xml",
        "text/plain",
        "text/markdown",
        "text/x-markdown",
        "text/x-rst",
        "application/pdf",
    }
)
SITEMAP_TYPES = frozenset({"application/xml", "text/xml", "application/gzip", "application/x-gzip"})
# Types that say nothing about the content: the URL suffix or the first bytes decide.
_GENERIC_TYPES = frozenset(
    {
        "",
        "application/octet-stream",
        "binary/octet-stream",
        "application/unknown",
        "unknown/unknown",
    }
)
_SUFFIX_TYPES = {
    ".html": "text/html",
    ".htm": "text/html",
    ".shtml": "text/html",
    ".xhtml": "application/xhtml+xml",
    ".md": "text/markdown",
    ".markdown": "text/markdown",
    ".mdown": "text/markdown",
    ".rst": "text/x-rst",
    ".txt": "text/plain",
    ".text": "text/plain",
    ".pdf": "application/pdf",
    ".xml": "application/xml",
    ".gz": "application/gzip",
}
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_GONE = frozenset({404, 410})
_SNIFF_BYTES = 1024
# What getaddrinfo failures say on glibc, musl, macOS and Windows: httpcore drops the
# socket.gaierror itself, so its message is all there is to go on.
_DNS_WORDS = (
    "name or service not known",
    "temporary failure in name resolution",
    "no address associated with hostname",
    "name does not resolve",
    "nodename nor servname",
    "getaddrinfo failed",
)
POLICY_REFUSAL = "refused by URL policy: "
"""How the reason of every refusal by a :class:`~knowledge_agent.crawl.UrlPolicy` starts."""
_HTTPX_MISSING = missing_extra("crawling web pages", "web")


class Stopped(Exception):
    """The crawl was stopped while this request waited or read; its result is not wanted."""


def require_httpx() -> None:
    """Raise ConfigError when httpx (the ``web`` extra) is not installed."""
    try:
        import httpx  # noqa: F401
    except ImportError as exc:
        raise ConfigError(_HTTPX_MISSING) from exc


@dataclass(frozen=True)
class Response:
    """A 2xx or 304 answer, body read in full (empty for a 304)."""

    requested_url: str
    url: str
    status: int
    content_type: str
    charset: str | None
    body: bytes
    etag: str | None
    last_modified: str | None
    known: KnownPage | None  # the page the conditional request was made for


def parse_content_type(header: str | None) -> tuple[str, str | None]:
    """``(media type, charset)`` of a Content-Type header; ``("", None)`` when absent."""
    if not header:
        return "", None
    media, _, params = header.partition(";")
    charset = None
    for param in params.split(";"):
        name, _, value = param.partition("=")
        if name.strip().lower() == "charset" and value.strip():
            charset = value.strip().strip("\"'") or None
    return media.strip().lower(), charset


def sniff_suffix(url: str) -> str | None:
    """The media type a URL's file suffix suggests, or None when it has none."""
    path = urlsplit(url).path
    name = path.rsplit("/", 1)[-1].lower()
    if "." not in name:
        return None
    suffix = "." + name.rsplit(".", 1)[-1]
    if suffix in _SUFFIX_TYPES:
        return _SUFFIX_TYPES[suffix]
    guessed, _ = mimetypes.guess_type(name, strict=False)
    return guessed.lower() if guessed else None


def sniff_bytes(head: bytes) -> str:
    """The media type the first bytes of a body suggest (``application/octet-stream``
    for binary data)."""
    if head.startswith(b"%PDF-"):
        return "application/pdf"
    if head.startswith(b"\x1f\x8b"):
        return "application/gzip"
    if binary_problem(head[:_SNIFF_BYTES]) is not None:
        return "application/octet-stream"
    start = head[:_SNIFF_BYTES].lstrip(b"\xef\xbb\xbf \t\r\n").lower()
    if start.startswith((b"<!doctype html", b"<html")) or b"<body" in start:
        return "text/html"
    if start.startswith(b"<?xml"):
        return "application/xhtml+xml" if b"<html" in start else "application/xml"
    return "text/plain"


def format_seconds(seconds: float) -> str:
    """``2.0``, ``0.5``, ``0.25``: one decimal unless more are needed."""
    return f"{seconds:.1f}" if round(seconds, 1) == seconds else f"{seconds:g}"


def timed_out(timeout: float) -> str:
    """The reason of a request that passed its deadline: ``timed out after 15.0 s``."""
    return f"timed out after {format_seconds(timeout)} s"


def describe_error(exc: BaseException, timeout: float) -> str:
    """A short reason for a failed request, from the exception and its causes."""
    import httpx

    if isinstance(exc, httpx.TimeoutException):
        return timed_out(timeout)
    if _refused(exc):
        return str(exc)
    for cause in _causes(exc):
        if isinstance(cause, socket.gaierror):
            return "not found: name does not resolve"
        if isinstance(cause, ConnectionRefusedError):
            return "connection refused"
        if isinstance(cause, ssl.SSLCertVerificationError):
            return f"TLS error: {cause.verify_message or cause.reason or cause}"
        if isinstance(cause, ssl.SSLError):
            return f"TLS error: {cause.reason or cause}"
        if isinstance(cause, ConnectionResetError):
            return "connection reset by the server"
    message = str(exc) or type(exc).__name__
    lowered = message.lower()
    if isinstance(exc, httpx.ConnectError):
        if any(words in lowered for words in _DNS_WORDS):
            return "not found: name does not resolve"
        if "refused" in lowered:
            return "connection refused"
        if "ssl" in lowered or "certificate" in lowered:
            return f"TLS error: {message}"
        return f"could not connect: {message}"
    if isinstance(exc, (httpx.RemoteProtocolError, httpx.DecodingError)):
        return f"invalid response: {message}"
    if isinstance(exc, httpx.ProtocolError):
        return f"protocol error: {message}"
    if isinstance(exc, httpx.NetworkError):
        return f"network error: {message}"
    if isinstance(exc, (httpx.InvalidURL, httpx.UnsupportedProtocol)):
        return f"invalid URL: {message}"
    return f"{type(exc).__name__}: {message}"


def _causes(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


class Throttle:
    """At least ``delay`` seconds between two request starts to one host.

    A start time is reserved under a lock and waited for outside it, so threads bound for
    the same host queue up in order and those bound elsewhere are not held back.
    """

    def __init__(self, delay: float) -> None:
        self._delay = delay
        self._minimum: dict[str, float] = {}
        self._next: dict[str, float] = {}
        self._lock = threading.Lock()

    def set_minimum(self, host: str, delay: float) -> None:
        """Raise the delay for ``host`` (robots.txt Crawl-delay)."""
        with self._lock:
            self._minimum[host] = max(self._minimum.get(host, 0.0), delay)

    def wait(self, host: str, stop: threading.Event) -> None:
        """Wait for ``host``'s next start slot; raise :class:`Stopped` if stopped meanwhile."""
        with self._lock:
            now = time.monotonic()
            delay = max(self._delay, self._minimum.get(host, 0.0))
            start = max(now, self._next.get(host, 0.0))
            self._next[host] = start + delay
        stopped = stop.wait(start - now) if start > now else stop.is_set()
        if stopped:
            raise Stopped


Check = Callable[[str, int], CrawlFailure | None]
"""Decides whether a hop may be requested: ``(url, hop number) -> None or a skip``."""


class BodySink(Protocol):
    """Takes a body as it arrives instead of the :class:`Response` holding it."""

    max_bytes: int
    """Decoded bytes it takes at most; past that the answer is too large."""

    def feed(self, data: bytes) -> bool:
        """Take the next decoded bytes; True when the rest need not be read."""
        ...


SinkFor = Callable[[str, str], BodySink | None]
"""``(final URL, media type) -> a sink for the body, or None to keep it in the Response``."""


class _Abort(Exception):
    """Reading a body ended early: the failure to report instead."""

    def __init__(self, failure: CrawlFailure) -> None:
        super().__init__(failure.reason)
        self.failure = failure


class Fetcher:
    """GET requests on a shared ``httpx.Client`` (thread-safe; one per crawl).

    ``timeout`` is a total deadline per hop, from sending the request to the last body
    byte (waiting for the throttle is not part of it). ``on_hop`` is told when each hop
    starts (its ``time.monotonic()``) and ends (``None``), so a watchdog can give up on
    a thread blocked in one read.
    """

    def __init__(
        self,
        client: httpx.Client,
        *,
        timeout: float,
        follow_redirects: bool,
        max_redirects: int,
        throttle: Throttle,
        stop: threading.Event,
        on_hop: Callable[[float | None], None] | None = None,
    ) -> None:
        self._client = client
        self._timeout = timeout
        self._follow = follow_redirects
        self._max_redirects = max_redirects
        self._throttle = throttle
        self._stop = stop
        self._on_hop = on_hop or (lambda _started: None)
        self._bytes = 0
        self._decoded = 0
        self._bytes_lock = threading.Lock()

    @property
    def bytes_read(self) -> int:
        """Body bytes downloaded so far (as sent, before decoding), by every thread."""
        return self._bytes

    @property
    def bytes_decoded(self) -> int:
        """Body bytes after undoing the Content-Encoding, by every thread."""
        return self._decoded

    @property
    def throttle(self) -> Throttle:
        return self._throttle

    def get(
        self,
        url: str,
        *,
        check: Check,
        accept: Collection[str] | None,
        max_bytes: int,
        known: Callable[[str], KnownPage | None] = lambda _key: None,
        truncate: bool = False,
        sink_for: SinkFor | None = None,
    ) -> Response | CrawlFailure:
        """GET ``url`` (normalised), following redirects; a :class:`Response` or a failure.

        ``check`` runs before each hop; ``accept`` is the set of media types wanted
        (``None``: any); ``known`` gives the known page of a URL key, for conditional
        headers; ``truncate`` keeps the first ``max_bytes`` of a longer body instead of
        skipping it; ``sink_for`` may take a 2xx body as it streams in (the Response's
        ``body`` is then empty).
        """
        current = url
        visited = [url]
        for hop in range(self._max_redirects + 1):
            refused = check(current, hop)
            if refused is not None:
                return _at_hop(refused, url, current)
            page = known(url_key(current))
            self._throttle.wait(urlsplit(current).netloc, self._stop)
            started = time.monotonic()
            self._on_hop(started)
            try:
                with self._client.stream("GET", current, headers=_conditional(page)) as reply:
                    if reply.status_code not in _REDIRECTS:
                        body = _Body(max_bytes, truncate, started + self._timeout, sink_for)
                        answer = self._answer(reply, url, current, accept, page, body)
                        return _at_hop(answer, url, current)
                    target = self._redirect_target(reply, current, visited)
            except Stopped:
                raise
            except Exception as exc:  # every transport error is this URL's failure
                if self._stop.is_set():
                    raise Stopped from exc  # the client was closed under us: not a failure
                logger.debug("GET %s failed", current, exc_info=True)
                reason = describe_error(exc, self._timeout)
                return _at_hop(_failure(url, reason, skipped=_refused(exc)), url, current)
            finally:
                self._on_hop(None)
            if isinstance(target, CrawlFailure):
                return replace(target, url=url)
            visited.append(target)
            current = target
        return _failure(url, f"too many redirects ({self._max_redirects})")

    def _redirect_target(
        self, reply: httpx.Response, current: str, visited: list[str]
    ) -> str | CrawlFailure:
        status = reply.status_code
        location = reply.headers.get("location")
        if not location:
            return _failure(current, f"HTTP {status} without a Location header", status=status)
        try:
            target = normalize_url(location, current)
        except ValueError:
            return _failure(current, f"redirect to an unsupported URL {location!r}", status=status)
        if not self._follow:
            return _failure(current, f"redirected to {target}", status=status, skipped=True)
        if target in visited:
            return _failure(current, "redirect loop", status=status)
        if len(visited) > self._max_redirects:
            return _failure(current, f"too many redirects ({self._max_redirects})", status=status)
        return target

    def _answer(
        self,
        reply: httpx.Response,
        requested: str,
        url: str,
        accept: Collection[str] | None,
        known: KnownPage | None,
        body: _Body,
    ) -> Response | CrawlFailure:
        status = reply.status_code
        media, charset = parse_content_type(reply.headers.get("content-type"))
        etag = reply.headers.get("etag")
        modified = reply.headers.get("last-modified")
        if status == 304:
            if known is None:
                return _failure(url, "HTTP 304 to a request that was not conditional", status=304)
            media = media or sniff_suffix(url) or ""
            return Response(
                requested_url=requested,
                url=url,
                status=304,
                content_type=media,
                charset=charset,
                body=b"",
                etag=etag or known.etag,
                last_modified=modified or known.last_modified,
                known=known,
            )
        if not 200 <= status < 300:
            return _failure(url, f"HTTP {status}", status=status, gone=status in _GONE)
        media = _refine(media, url)
        if media and accept is not None and media not in accept:
            return _failure(url, f"unsupported content type {media}", status=status, skipped=True)
        sink = body.sink_for(url, media) if body.sink_for is not None else None
        limit = sink.max_bytes if sink is not None else body.max_bytes
        length = _content_length(reply)
        if length is not None and length > limit and not body.truncate:
            return _too_large(url, limit, status)
        try:
            data = self._read(reply, url, limit, body, sink)
        except _Abort as abort:
            return replace(abort.failure, status=status)
        if not media:
            media = sniff_bytes(data[:_SNIFF_BYTES])
            if accept is not None and media not in accept:
                reason = f"unsupported content type {media}"
                return _failure(url, reason, status=status, skipped=True)
        return Response(
            requested_url=requested,
            url=url,
            status=status,
            content_type=media,
            charset=charset,
            body=data,
            etag=etag,
            last_modified=modified,
            known=known,
        )

    def _read(
        self, reply: httpx.Response, url: str, limit: int, body: _Body, sink: BodySink | None
    ) -> bytes:
        """The decoded body (empty when ``sink`` took it), up to ``limit`` bytes.

        Raises :class:`_Abort` past ``limit`` (unless ``body.truncate``: the first
        ``limit`` bytes are kept), past the deadline, or for an undecodable body.
        """
        if reply.is_stream_consumed:
            # A transport that handed over a body it had read and decoded already (an
            # httpx.MockTransport): there is nothing left to stream or to decode.
            decoder, stream = Decoder(), iter([reply.content])
        else:
            try:
                decoder = Decoder(reply.headers.get("content-encoding", ""))
            except ValueError as exc:
                raise _Abort(_failure(url, f"invalid response: {exc}")) from None
            stream = reply.iter_raw()
        chunks: list[bytes] = []
        raw = decoded = 0
        try:
            for chunk in stream:
                if self._stop.is_set():
                    raise Stopped
                if time.monotonic() > body.deadline:
                    raise _Abort(_failure(url, timed_out(self._timeout)))
                raw += len(chunk)
                try:
                    for piece in decoder.decode(chunk):
                        decoded += len(piece)
                        if decoded > limit:
                            if not body.truncate:
                                raise _Abort(_too_large(url, limit, 0))
                            chunks.append(piece[: len(piece) - (decoded - limit)])
                            return b"".join(chunks)
                        if sink is None:
                            chunks.append(piece)
                        elif sink.feed(piece):
                            return b""
                except ValueError as exc:
                    raise _Abort(_failure(url, f"invalid response: {exc}")) from None
        finally:
            with self._bytes_lock:
                self._bytes += raw
                self._decoded += decoded
        return b"".join(chunks)


@dataclass(frozen=True)
class _Body:
    """How the body of one hop may be read."""

    max_bytes: int
    truncate: bool
    deadline: float  # time.monotonic() past which the hop has timed out
    sink_for: SinkFor | None


def _at_hop(result: Response | CrawlFailure, url: str, hop: str) -> Response | CrawlFailure:
    """A failure is reported for the URL that was asked for, naming the hop it came from."""
    if not isinstance(result, CrawlFailure):
        return result
    reason = result.reason if hop == url else f"{result.reason} (after a redirect to {hop})"
    return replace(result, url=url, reason=reason)


def _refused(exc: BaseException) -> bool:
    # By its message: httpcore re-raises connection errors `from None`, cutting the chain.
    return str(exc).startswith(POLICY_REFUSAL)


def _refine(media: str, url: str) -> str:
    """The media type to trust: the header's, unless it is generic, or plain text for a
    file whose suffix names a markup (raw Markdown and reStructuredText are served as
    text/plain). Empty when only the body can tell."""
    suffix = sniff_suffix(url)
    if media in _GENERIC_TYPES:
        return suffix or ""
    if media == "text/plain" and suffix in ("text/markdown", "text/x-rst"):
        return suffix
    return media


def _content_length(reply: httpx.Response) -> int | None:
    try:
        return int(reply.headers["content-length"])
    except (KeyError, ValueError):
        return None


def _conditional(page: KnownPage | None) -> dict[str, str]:
    headers: dict[str, str] = {}
    if page is not None:
        if page.etag:
            headers["If-None-Match"] = page.etag
        if page.last_modified:
            headers["If-Modified-Since"] = page.last_modified
    return headers


def _too_large(url: str, max_bytes: int, status: int) -> CrawlFailure:
    return _failure(url, f"larger than {max_bytes:,} bytes", status=status, skipped=True)


def _failure(
    url: str,
    reason: str,
    *,
    status: int | None = None,
    skipped: bool = False,
    gone: bool = False,
) -> CrawlFailure:
    return CrawlFailure(url=url, reason=reason, skipped=skipped, status=status, gone=gone)
