"""A hostile web site for crawl tests and the stress benchmark: everything on 127.0.0.1.

:class:`HostileServer` is a ``ThreadingHTTPServer`` in a daemon thread whose routes do
what a hostile or broken site does to a crawler. Every route is bounded (in bytes, URLs
or seconds) and ends early when the server closes, so leaving the ``with`` block never
waits for a handler. The API, small on purpose::

    with HostileServer() as site:
        site.url("/x")                            # http://127.0.0.1:PORT/x
        site.page(path, body, content_type=..., status=200)
                                                  # an ordinary answer
        site.robots(text)                         # /robots.txt
        site.redirect(path, to, status=302)       # to a path or any URL (another port)
        site.redirect_chain(path, hops, to)       # path -> path/1 -> ... -> to
        site.dribble(path, size, interval)        # 200, then one byte every interval
        site.stall(path, seconds)                 # 200 and headers, then silence
        site.gzip_bomb(path, megabytes, content_encoding=True)
                                                  # gzip of that many MB of spaces, as a
                                                  # Content-Encoding or as a .gz file
        site.huge_sitemap(path, count, gzipped=False)
                                                  # a urlset of `count` URLs generated
                                                  # while streaming (1M costs no memory)
        site.sitemap_index(path, urls)            # a sitemapindex listing `urls`
        site.utf16_sitemap(path, urls, big_endian=False, laughs=False)
                                                  # UTF-16 with a BOM; `laughs` adds a
                                                  # billion-laughs entity declaration
        site.hits(path), site.total_hits          # requests seen (this port only)
        site.active(path)                         # handlers still answering `path`
        site.sent(path)                           # body bytes written for `path`

The URLs a huge sitemap lists are ``{site.url()}/page/N.html``; those pages answer with
a small HTML page each.
"""

from __future__ import annotations

import functools
import struct
import threading
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit
from xml.sax.saxutils import escape

__all__ = ["HostileServer"]

_MB = 1024 * 1024
_CHUNK = 64 * 1024
_NS = "http://www.sitemaps.org/schemas/sitemap/0.9"
_LAUGHS = (
    '<!DOCTYPE urlset [<!ENTITY lol "lol">'
    + "".join(
        f'<!ENTITY lol{n} "{("&lol" + (str(n - 1) if n > 1 else "") + ";") * 10}">'
        for n in range(1, 10)
    )
    + "]>"
)

_Answer = Callable[["_Handler"], None]


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False  # never wait for a handler stuck on a slow route
    site: HostileServer

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # a crawler hanging up mid-answer is the point of most routes


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    timeout = 5  # idle keep-alive connections end by themselves
    server: _Server

    def do_GET(self) -> None:
        self.server.site._serve(self)

    def log_message(self, format: str, *args: object) -> None:
        pass


class HostileServer:
    """A local HTTP/1.1 server whose routes attack a crawler; see the module docstring."""

    def __init__(self) -> None:
        self._routes: dict[str, _Answer] = {}
        self._lock = threading.Lock()
        self._hits: Counter[str] = Counter()
        self._active: Counter[str] = Counter()
        self._sent: Counter[str] = Counter()
        self._closing = threading.Event()
        self._server: _Server | None = None

    # -- lifecycle -------------------------------------------------------------

    def __enter__(self) -> HostileServer:
        server = _Server(("127.0.0.1", 0), _Handler)
        server.site = self
        self._server = server
        thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._closing.set()  # every route loop ends at its next step
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    @property
    def port(self) -> int:
        assert self._server is not None, "use HostileServer as a context manager"
        return int(self._server.server_address[1])

    def url(self, path: str = "/") -> str:
        """The absolute URL of ``path`` on this server."""
        return f"http://127.0.0.1:{self.port}{path}"

    # -- what the server saw ---------------------------------------------------

    def hits(self, path: str) -> int:
        """Requests for ``path`` (without its query) so far."""
        with self._lock:
            return self._hits[path]

    @property
    def total_hits(self) -> int:
        """Requests for any path so far."""
        with self._lock:
            return sum(self._hits.values())

    def active(self, path: str) -> int:
        """Handlers answering ``path`` right now (a blocked one included)."""
        with self._lock:
            return self._active[path]

    def sent(self, path: str) -> int:
        """Body bytes written for ``path`` so far, as sent (compressed if it is)."""
        with self._lock:
            return self._sent[path]

    # -- routes ----------------------------------------------------------------

    def page(
        self,
        path: str,
        body: str | bytes,
        *,
        content_type: str = "text/html; charset=utf-8",
        headers: dict[str, str] | None = None,
        status: int = 200,
    ) -> None:
        """Answer ``path`` with ``body``."""
        data = body.encode("utf-8") if isinstance(body, str) else body
        fields = {"Content-Type": content_type, **(headers or {})}

        def answer(handler: _Handler) -> None:
            self._send(handler, path, data, fields, status)

        self._route(path, answer)

    def robots(self, text: str) -> None:
        self.page("/robots.txt", text, content_type="text/plain")

    def redirect(self, path: str, to: str, status: int = 302) -> None:
        """Answer ``path`` with a redirect to ``to`` (a path, or a URL on any server)."""

        def answer(handler: _Handler) -> None:
            self._send(handler, path, b"", {"Location": to}, status=status)

        self._route(path, answer)

    def redirect_chain(self, path: str, hops: int, to: str) -> None:
        """``path`` redirects to ``path/1``, that to ``path/2``, ... and ``path/hops`` to
        ``to``: ``hops + 1`` redirects in all."""
        steps = [path] + [f"{path}/{n}" for n in range(1, hops + 1)]
        for here, there in zip(steps, [*steps[1:], to], strict=True):
            self.redirect(here, there)

    def dribble(
        self,
        path: str,
        size: int = 1000,
        interval: float = 0.05,
        *,
        content_type: str = "text/html; charset=utf-8",
    ) -> None:
        """A 200 whose ``size``-byte body comes one byte every ``interval`` seconds."""
        body = (b"<html><body>" + b"x" * size)[:size]

        def answer(handler: _Handler) -> None:
            self._head(handler, 200, {"Content-Type": content_type, "Content-Length": str(size)})
            for index in range(size):
                if self._closing.wait(interval):
                    return
                self._write(handler, path, body[index : index + 1])

        self._route(path, answer)

    def stall(self, path: str, seconds: float) -> None:
        """A 200 with headers, then no byte for ``seconds`` (then the connection closes)."""

        def answer(handler: _Handler) -> None:
            self._head(handler, 200, {"Content-Type": "text/html", "Content-Length": "100"})
            self._closing.wait(seconds)
            handler.close_connection = True

        self._route(path, answer)

    def gzip_bomb(
        self,
        path: str,
        megabytes: int,
        *,
        content_encoding: bool = True,
        content_type: str | None = None,
        prefix: bytes = b"",
    ) -> int:
        """Serve gzip of ``prefix`` + ``megabytes`` MiB of spaces (about 1 KiB per MiB):
        with ``Content-Encoding: gzip`` (default type text/html) or as a gzip file (default
        type application/gzip, e.g. for a ``.xml.gz`` sitemap). Returns the size sent."""
        kind = content_type or ("text/html" if content_encoding else "application/gzip")
        fields = {"Content-Type": kind}
        if content_encoding:
            fields["Content-Encoding"] = "gzip"
        pieces = list(_gzip_bomb(prefix, megabytes))
        size = sum(len(piece) for piece in pieces)
        fields["Content-Length"] = str(size)

        def answer(handler: _Handler) -> None:
            self._head(handler, 200, fields)
            for piece in pieces:
                if self._closing.is_set():
                    return
                self._write(handler, path, piece)

        self._route(path, answer)
        return size

    def huge_sitemap(self, path: str, count: int, *, gzipped: bool = False) -> None:
        """A ``urlset`` of ``count`` URLs (``/page/N.html`` here), generated while it is
        written, sent chunked; gzip-compressed as a file when ``gzipped``."""
        self._page_route()
        base = self.url("/page/")

        def entries() -> Iterator[str]:
            for number in range(count):
                yield f"<url><loc>{base}{number}.html</loc></url>"

        self._route(path, self._xml_stream(path, "urlset", entries, gzipped))

    def sitemap_index(self, path: str, urls: list[str]) -> None:
        """A ``sitemapindex`` listing ``urls``."""

        def entries() -> Iterator[str]:
            for url in urls:
                yield f"<sitemap><loc>{escape(url)}</loc></sitemap>"

        self._route(path, self._xml_stream(path, "sitemapindex", entries, False))

    def utf16_sitemap(
        self, path: str, urls: list[str], *, big_endian: bool = False, laughs: bool = False
    ) -> None:
        """A ``urlset`` in UTF-16 with a byte-order mark; ``laughs`` declares the billion
        laughs entities and uses the biggest in a ``<loc>``."""
        self._page_route()
        doctype = _LAUGHS if laughs else ""
        locs = [escape(url) for url in urls] + (["&lol9;"] if laughs else [])
        entries = "".join(f"<url><loc>{loc}</loc></url>" for loc in locs)
        text = (
            f'<?xml version="1.0" encoding="UTF-16"?>{doctype}'
            f'<urlset xmlns="{_NS}">{entries}</urlset>'
        )
        codec = "utf-16-be" if big_endian else "utf-16-le"
        bom = b"\xfe\xff" if big_endian else b"\xff\xfe"
        self.page(path, bom + text.encode(codec), content_type="application/xml")

    # -- serving ---------------------------------------------------------------

    def _route(self, path: str, answer: _Answer) -> None:
        with self._lock:
            self._routes[path] = answer

    def _page_route(self) -> None:
        """``/page/N.html`` answers with a small page (the URLs huge sitemaps list)."""
        with self._lock:
            self._routes.setdefault("/page/", self._small_page)

    def _small_page(self, handler: _Handler) -> None:
        path = urlsplit(handler.path).path
        self._send(handler, path, f"<html><body><p>{path}</p></body></html>".encode(), {})

    def _serve(self, handler: _Handler) -> None:
        path = urlsplit(handler.path).path
        with self._lock:
            self._hits[path] += 1
            self._active[path] += 1
            route = self._routes.get(path)
            if route is None and path.startswith("/page/"):
                route = self._routes.get("/page/")
        try:
            if route is None:
                self._send(handler, path, b"not found", {"Content-Type": "text/plain"}, 404)
            else:
                route(handler)
        except (BrokenPipeError, ConnectionResetError):
            handler.close_connection = True
        finally:
            with self._lock:
                self._active[path] -= 1

    def _xml_stream(
        self, path: str, root: str, entries: Callable[[], Iterator[str]], gzipped: bool
    ) -> _Answer:
        def answer(handler: _Handler) -> None:
            kind = "application/gzip" if gzipped else "application/xml"
            self._head(handler, 200, {"Content-Type": kind, "Transfer-Encoding": "chunked"})
            compressor = zlib.compressobj(6, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
            for text in _blocks(root, entries()):
                if self._closing.is_set():
                    return
                data = text.encode("utf-8")
                self._chunk(handler, path, compressor.compress(data) if gzipped else data)
            if gzipped:
                self._chunk(handler, path, compressor.flush())
            handler.wfile.write(b"0\r\n\r\n")
            handler.wfile.flush()

        return answer

    def _head(self, handler: _Handler, status: int, fields: dict[str, str]) -> None:
        handler.send_response(status)
        for name, value in fields.items():
            handler.send_header(name, value)
        handler.end_headers()
        handler.wfile.flush()

    def _send(
        self,
        handler: _Handler,
        path: str,
        body: bytes,
        fields: dict[str, str],
        status: int = 200,
    ) -> None:
        self._head(handler, status, {**fields, "Content-Length": str(len(body))})
        self._write(handler, path, body)

    def _write(self, handler: _Handler, path: str, data: bytes) -> None:
        if data:
            handler.wfile.write(data)
            handler.wfile.flush()
            with self._lock:
                self._sent[path] += len(data)

    def _chunk(self, handler: _Handler, path: str, data: bytes) -> None:
        if data:
            self._write(handler, path, b"%x\r\n%s\r\n" % (len(data), data))


def _blocks(root: str, entries: Iterator[str]) -> Iterator[str]:
    """The document in pieces of about 64 KiB: prolog, entries, end tag."""
    yield f'<?xml version="1.0" encoding="UTF-8"?>\n<{root} xmlns="{_NS}">\n'
    block: list[str] = []
    size = 0
    for entry in entries:
        block.append(entry)
        size += len(entry)
        if size >= _CHUNK:
            yield "".join(block)
            block, size = [], 0
    yield "".join(block) + f"</{root}>\n"


@functools.lru_cache(maxsize=1)
def _spaces_block() -> bytes:
    """Raw deflate of 1 MiB of spaces, ending in a full flush so copies can follow it."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    return compressor.compress(b" " * _MB) + compressor.flush(zlib.Z_FULL_FLUSH)


def _gzip_bomb(prefix: bytes, megabytes: int) -> Iterator[bytes]:
    """One gzip member: ``prefix`` then ``megabytes`` MiB of spaces, built from copies of
    one compressed block (no gigabyte is ever compressed)."""
    yield b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff"  # gzip header: deflate, no name
    compressor = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    yield compressor.compress(prefix) + compressor.flush(zlib.Z_FULL_FLUSH)
    block = _spaces_block()
    for _ in range(megabytes):
        yield block
    yield compressor.flush()  # the final (empty) block
    crc = zlib.crc32(prefix)
    spaces = b" " * _MB
    for _ in range(megabytes):
        crc = zlib.crc32(spaces, crc)
    yield struct.pack("<II", crc, (len(prefix) + megabytes * _MB) & 0xFFFFFFFF)
