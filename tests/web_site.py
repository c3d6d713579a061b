"""A local web site for crawl tests (no tests of its own): everything on 127.0.0.1.

:class:`SiteServer` serves a mutable route table from a ``ThreadingHTTPServer`` in a
daemon thread, counts requests per path and the most requests it had in flight at once,
answers conditional requests with 304 (automatic ETag and Last-Modified), and has
helpers for the awkward cases: an error status, a slow answer, a big streamed body, raw
bytes that are no HTTP, binary files, robots.txt and sitemaps. :func:`make_doc_site`
builds a generated, nested documentation site on it; :data:`SECTIONED_PAGE` is one page
whose sections are chunks of their own.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import random
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from email.utils import formatdate, parsedate_to_datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

__all__ = ["SECTIONED_PAGE", "DocPage", "DocSite", "RequestRecord", "SiteServer", "make_doc_site"]

SAMPLE_PDF = (
    Path(__file__).resolve().parent.parent
    / "knowledge_agent/samples/checkout-outage-postmortem.pdf"
)
# A 1x1 transparent PNG.
PNG_BYTES = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082"
)


def _filler(word: str) -> str:
    return " ".join([word] * 120)  # long enough to make its section a chunk of its own


SECTIONED_PAGE = f"""<html><head><title>Guide</title></head><body>
<p>Intro text about the guide, the tapir line.</p>
<h1 id="top">The Guide</h1>
<p>{_filler("alpha")}</p>
<h2 id="install">Installing</h2>
<p>{_filler("bravo")}</p>
<p>Run the zebra installer now.</p>
<h2>A section without an id</h2>
<p>{_filler("charlie")} and the yak line.</p>
<h2 id="usage">Usage</h2>
<p>{_filler("delta")}</p>
<p>Then the walrus command.</p>
</body></html>"""
"""A page with text before its first heading (tapir), sections with ids (zebra under
``#install``, walrus under ``#usage``) and one without (yak, so under ``#install``)."""

_CHUNK = 64 * 1024
_STEP = 0.02  # how often a sleeping handler looks whether the server is closing


@dataclass
class _Route:
    status: int = 200
    body: bytes = b""
    content_type: str | None = "text/html; charset=utf-8"
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    conditional: bool = True
    etag: str | None = None
    last_modified: str | None = None
    big: int | None = None  # a generated body of this many bytes, streamed
    content_length: bool = True
    raw: bytes | None = None  # written as-is instead of an HTTP response


@dataclass(frozen=True)
class RequestRecord:
    """One request the server received."""

    target: str  # path and query as sent
    path: str
    started: float  # time.monotonic()
    headers: dict[str, str]  # header names lower-case
    status: int | None = None


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False  # never wait for a handler stuck on a slow route
    site: SiteServer

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # a client that hung up mid-answer is what the slow and big routes are for


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body go out in separate writes: with Nagle's algorithm a keep-alive client
    # would wait for the delayed ACK (about 40 ms) on every request.
    disable_nagle_algorithm = True
    server: _Server
    timeout = 5  # idle keep-alive connections end by themselves

    record_index = -1
    record_generation = -1

    def do_GET(self) -> None:
        self.server.site._serve(self)

    def send_response(self, code: int, message: str | None = None) -> None:
        # Noted before the answer leaves: a client may act on it before the handler ends.
        self.server.site._note_status(self.record_generation, self.record_index, code)
        super().send_response(code, message)

    def log_message(self, format: str, *args: object) -> None:
        pass  # keep the test output clean


class SiteServer:
    """A local HTTP/1.1 server with a route table tests change while it runs.

    Routes are matched on the full target (path and query) first, then on the path, so
    ``/page?b=2&a=1`` and ``/page`` can be served differently or alike.
    """

    def __init__(self) -> None:
        self._routes: dict[str, _Route] = {}
        self._lock = threading.Lock()
        self._hits: Counter[str] = Counter()
        self._records: list[RequestRecord] = []
        self._generation = 0
        self._in_flight = 0
        self._max_in_flight = 0
        self._clock = 1_700_000_000  # Last-Modified values: one second later per change
        self._closing = threading.Event()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------

    def __enter__(self) -> SiteServer:
        server = _Server(("127.0.0.1", 0), _Handler)
        server.site = self
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._closing.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    @property
    def port(self) -> int:
        assert self._server is not None, "use SiteServer as a context manager"
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def url(self, path: str = "/") -> str:
        """The absolute URL of ``path`` on this server."""
        return self.base_url + path

    # -- routes ----------------------------------------------------------------

    def set_page(
        self,
        path: str,
        body: str | bytes,
        *,
        content_type: str | None = "text/html; charset=utf-8",
        status: int = 200,
        headers: dict[str, str] | None = None,
        delay: float = 0.0,
        conditional: bool = True,
    ) -> None:
        """Serve ``body`` at ``path``. With ``conditional`` the answer carries an ETag
        (a hash of the body) and a Last-Modified date and conditional requests get 304;
        without, neither header is sent and every answer is a 200. ``content_type=None``
        sends no Content-Type at all."""
        data = body.encode("utf-8") if isinstance(body, str) else body
        with self._lock:
            self._clock += 1
            route = _Route(
                status=status,
                body=data,
                content_type=content_type,
                headers=dict(headers or {}),
                delay=delay,
                conditional=conditional,
            )
            if conditional:
                route.etag = '"' + hashlib.sha256(data).hexdigest()[:20] + '"'
                route.last_modified = formatdate(self._clock, usegmt=True)
            self._routes[path] = route

    def redirect(self, path: str, to: str, status: int = 301) -> None:
        """Answer ``path`` with a redirect to ``to`` (a path or a URL)."""
        with self._lock:
            self._routes[path] = _Route(status=status, content_type=None, headers={"Location": to})

    def remove(self, path: str) -> None:
        """Forget ``path``: it answers 404 from now on."""
        with self._lock:
            self._routes.pop(path, None)

    def set_error(self, path: str, status: int = 500) -> None:
        self.set_page(path, f"error {status}", content_type="text/plain", status=status)

    def set_slow(self, path: str, seconds: float, body: str = "<p>slow</p>") -> None:
        """A page that waits ``seconds`` before answering."""
        self.set_page(path, body, delay=seconds)

    def set_big(
        self,
        path: str,
        size: int,
        *,
        content_type: str = "text/plain; charset=utf-8",
        content_length: bool = True,
    ) -> None:
        """A generated body of ``size`` bytes, streamed in chunks; without
        ``content_length`` it is sent chunked, so only reading tells its size."""
        with self._lock:
            self._routes[path] = _Route(
                content_type=content_type, big=size, content_length=content_length
            )

    def set_raw(self, path: str, data: bytes) -> None:
        """Write ``data`` as the whole answer and hang up: a broken server."""
        with self._lock:
            self._routes[path] = _Route(raw=data)

    def set_png(self, path: str = "/image.png") -> None:
        self.set_page(path, PNG_BYTES, content_type="image/png")

    def set_pdf(
        self, path: str = "/manual.pdf", *, content_type: str | None = "application/pdf"
    ) -> bytes:
        """Serve the sample PDF; returns its bytes."""
        data = SAMPLE_PDF.read_bytes()
        self.set_page(path, data, content_type=content_type)
        return data

    def set_robots(self, text: str) -> None:
        self.set_page("/robots.txt", text, content_type="text/plain")

    def set_sitemap(
        self, path: str, urls: list[str], *, gzipped: bool = False, namespaced: bool = True
    ) -> None:
        """A ``urlset`` listing ``urls`` (gzip-compressed when ``gzipped``)."""
        entries = "".join(f"<url><loc>{_xml(url)}</loc></url>" for url in urls)
        self._set_xml(path, "urlset", entries, gzipped=gzipped, namespaced=namespaced)

    def set_sitemap_index(self, path: str, sitemap_urls: list[str]) -> None:
        """A ``sitemapindex`` listing ``sitemap_urls``."""
        entries = "".join(f"<sitemap><loc>{_xml(url)}</loc></sitemap>" for url in sitemap_urls)
        self._set_xml(path, "sitemapindex", entries, gzipped=False, namespaced=True)

    def _set_xml(
        self, path: str, root: str, entries: str, *, gzipped: bool, namespaced: bool
    ) -> None:
        xmlns = ' xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"' if namespaced else ""
        text = f'<?xml version="1.0" encoding="UTF-8"?>\n<{root}{xmlns}>{entries}</{root}>\n'
        if gzipped:
            self.set_page(path, gzip.compress(text.encode()), content_type="application/gzip")
        else:
            self.set_page(path, text, content_type="application/xml")

    # -- what the server saw ---------------------------------------------------

    def hits(self, path: str) -> int:
        """Requests for ``path``: a target with ``?`` counts that exact target, a bare
        path counts every query string on it."""
        with self._lock:
            return self._hits[path]

    def reset_hits(self) -> None:
        with self._lock:
            self._hits.clear()
            self._records.clear()
            self._generation += 1  # answers to requests from before do not land in new records
            self._max_in_flight = 0

    @property
    def requests(self) -> list[RequestRecord]:
        """Every request since the last :meth:`reset_hits`, in arrival order."""
        with self._lock:
            return list(self._records)

    @property
    def max_in_flight(self) -> int:
        """The most requests the server was answering at one time."""
        with self._lock:
            return self._max_in_flight

    def statuses(self, status: int) -> list[str]:
        """Targets answered with ``status``."""
        return [record.target for record in self.requests if record.status == status]

    # -- serving ---------------------------------------------------------------

    def _serve(self, handler: _Handler) -> None:
        target = handler.path
        path = urlsplit(target).path
        with self._lock:
            self._hits[path] += 1
            if target != path:
                self._hits[target] += 1
            self._in_flight += 1
            self._max_in_flight = max(self._max_in_flight, self._in_flight)
            route = self._routes.get(target) or self._routes.get(path)
            handler.record_index = len(self._records)
            handler.record_generation = self._generation
            self._records.append(
                RequestRecord(
                    target=target,
                    path=path,
                    started=time.monotonic(),
                    headers={key.lower(): value for key, value in handler.headers.items()},
                )
            )
        try:
            self._answer(handler, route)
        except (BrokenPipeError, ConnectionResetError):
            handler.close_connection = True
        finally:
            with self._lock:
                self._in_flight -= 1

    def _note_status(self, generation: int, index: int, status: int) -> None:
        with self._lock:
            if generation == self._generation and 0 <= index < len(self._records):
                record = self._records[index]
                self._records[index] = dataclasses.replace(record, status=status)

    def _answer(self, handler: _Handler, route: _Route | None) -> int | None:
        if route is None:
            return _send(handler, 404, b"not found", {"Content-Type": "text/plain"})
        if route.delay and self._closing.wait(route.delay):
            handler.close_connection = True
            return None
        if route.raw is not None:
            handler.wfile.write(route.raw)
            handler.wfile.flush()
            handler.close_connection = True
            return None
        if route.big is not None:
            return self._stream_big(handler, route)
        headers = dict(route.headers)
        if route.content_type is not None:
            headers["Content-Type"] = route.content_type
        if route.etag is not None and route.last_modified is not None:
            headers["ETag"] = route.etag
            headers["Last-Modified"] = route.last_modified
            if route.status == 200 and _not_modified(handler, route):
                validators = {"ETag": route.etag, "Last-Modified": route.last_modified}
                return _send(handler, 304, b"", validators)
        return _send(handler, route.status, route.body, headers)

    def _stream_big(self, handler: _Handler, route: _Route) -> int:
        assert route.big is not None
        handler.send_response(200)
        handler.send_header("Content-Type", route.content_type or "text/plain")
        if route.content_length:
            handler.send_header("Content-Length", str(route.big))
        else:
            handler.send_header("Transfer-Encoding", "chunked")
        handler.end_headers()
        line = b"big body line, generated to fill the page up to its size\n"
        block = (line * (_CHUNK // len(line) + 1))[:_CHUNK]
        left = route.big
        while left > 0 and not self._closing.is_set():
            piece = block[: min(left, _CHUNK)]
            if route.content_length:
                handler.wfile.write(piece)
            else:
                handler.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            left -= len(piece)
        if not route.content_length:
            handler.wfile.write(b"0\r\n\r\n")
        handler.wfile.flush()
        return 200


def _send(handler: _Handler, status: int, body: bytes, headers: dict[str, str]) -> int:
    handler.send_response(status)
    for name, value in headers.items():
        handler.send_header(name, value)
    if status != 304:
        handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    if status != 304 and body:
        handler.wfile.write(body)
    handler.wfile.flush()
    return status


def _not_modified(handler: _Handler, route: _Route) -> bool:
    """RFC 9110: If-None-Match decides when present; else If-Modified-Since."""
    tags = handler.headers.get("If-None-Match")
    if tags is not None:
        return tags.strip() == "*" or route.etag in [tag.strip() for tag in tags.split(",")]
    since = handler.headers.get("If-Modified-Since")
    if since is None or route.last_modified is None:
        return False
    try:
        return parsedate_to_datetime(route.last_modified) <= parsedate_to_datetime(since)
    except (TypeError, ValueError):
        return False


def _xml(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


# -- a generated documentation site ----------------------------------------------

_SYLLABLES = (
    "ka", "lo", "mi", "ru", "te", "zan", "vor", "qui", "bex", "dul", "fen", "gor", "hap",
    "jin", "kel", "mor", "nix", "pol", "ryn", "sul", "tav", "wex", "yor", "zel",
)  # fmt: skip


@dataclass(frozen=True)
class DocPage:
    """One page of a generated site."""

    path: str
    url: str
    depth: int  # breadth-first distance from the start page
    title: str
    words: tuple[str, ...]  # made-up words found on this page only
    parent: str | None
    children: tuple[str, ...]


@dataclass(frozen=True)
class DocSite:
    """What a test needs to know of a generated site."""

    start_url: str
    pages: dict[str, DocPage]  # by path

    def at_depth(self, depth: int) -> set[str]:
        """Paths of the pages exactly ``depth`` links from the start page."""
        return {path for path, page in self.pages.items() if page.depth == depth}

    def within(self, depth: int) -> set[str]:
        """Paths of the pages at most ``depth`` links from the start page."""
        return {path for path, page in self.pages.items() if page.depth <= depth}

    def under(self, path: str) -> set[str]:
        """``path`` and every page below it."""
        return {other for other in self.pages if other.startswith(path)}


def make_doc_site(
    server: SiteServer,
    n_pages: int = 200,
    *,
    branching: int = 5,
    prefix: str = "/docs/",
    conditional: bool = True,
    seed: int = 7,
) -> DocSite:
    """Serve a documentation site of ``n_pages`` pages on ``server``; return its map.

    The pages form a tree filled breadth first, ``branching`` children each: page 0 is
    ``prefix`` (depth 0), page ``i`` lives at its parent's path plus ``s{i}/``. Every
    page has a title, an ``<h1>``, ``<h2 id=…>`` sections holding three made-up words
    of its own, a sidebar linking the home page and every top-level section, a link to
    its parent, and links to its children written five ways in turn: relative, absolute,
    root-relative with a fragment, with tracking parameters, and without the trailing
    slash (which the server redirects, as real servers do). Links to the sidebar, the
    parent and other sites never make a page nearer to the start than the tree says, so
    ``DocPage.depth`` is the breadth-first depth.
    """
    rng = random.Random(seed)
    used: set[str] = set()
    paths = [prefix]
    parents: list[int | None] = [None]
    depths = [0]
    for index in range(1, n_pages):
        parent = (index - 1) // branching
        paths.append(f"{paths[parent]}s{index}/")
        parents.append(parent)
        depths.append(depths[parent] + 1)
    children: dict[int, list[int]] = {index: [] for index in range(n_pages)}
    for index, parent in enumerate(parents):
        if parent is not None:
            children[parent].append(index)
    sections = children[0]
    pages: dict[str, DocPage] = {}
    for index, path in enumerate(paths):
        words = tuple(_word(rng, used) for _ in range(3))
        title = f"Page {index}: {words[0].capitalize()}"
        parent = parents[index]
        page = DocPage(
            path=path,
            url=server.url(path),
            depth=depths[index],
            title=title,
            words=words,
            parent=paths[parent] if parent is not None else None,
            children=tuple(paths[child] for child in children[index]),
        )
        pages[path] = page
        nav = [paths[section] for section in sections]
        html = _doc_html(server, page, nav, home=prefix)
        server.set_page(path, html, conditional=conditional)
        if index:
            server.redirect(path.rstrip("/"), path)
    return DocSite(start_url=server.url(prefix), pages=pages)


def _word(rng: random.Random, used: set[str]) -> str:
    while True:
        word = "".join(rng.choice(_SYLLABLES) for _ in range(4))
        if word not in used:
            used.add(word)
            return word


def _doc_html(server: SiteServer, page: DocPage, nav: list[str], *, home: str) -> str:
    one, two, three = page.words
    child_links = []
    for position, child in enumerate(page.children):
        name = child.rstrip("/").rsplit("/", 1)[-1]
        href = (
            f"{name}/",
            server.url(child),
            f"{child}#details",
            f"{name}/?utm_source=nav&utm_medium=sidebar",
            name,
        )[position % 5]
        child_links.append(f'<li><a href="{href}">{name}</a></li>')
    sidebar = "".join(f'<a href="{path}">{path}</a> ' for path in nav)
    parent = '<a href="../">up</a>' if page.parent else ""
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{page.title}</title></head>
<body>
<nav class="sidebar"><a href="{server.url(home + "./")}">Home</a> {sidebar}</nav>
<main>
<h1>{page.title}</h1>
<h2 id="overview">Overview</h2>
<p>This page explains {one} and how {one} relates to the rest of the guide.</p>
<h2 id="details">Details of {two}</h2>
<p>The {two} setting changes how {three} behaves; see the sections below.</p>
<ul class="children">{"".join(child_links)}</ul>
<p>{parent} <a href="mailto:docs@example.com">mail</a> <a href="javascript:void(0)">js</a>
<a href="https://example.com/elsewhere">elsewhere</a></p>
</main>
<footer class="footer">Generated documentation footer</footer>
</body></html>
"""
