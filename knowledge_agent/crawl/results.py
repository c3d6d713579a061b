"""What a crawl yields and reports: plain frozen dataclasses, safe to pass between threads."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CrawlFailure", "CrawlPage", "CrawlSummary", "KnownPage"]


@dataclass(frozen=True)
class KnownPage:
    """What the caller remembers of a page from the last crawl (keyed by ``url_key``).

    ``etag`` and ``last_modified`` make the request conditional; ``content_hash`` marks
    an unchanged 200; ``links`` are followed when the server answers 304.
    """

    url: str
    etag: str | None = None
    last_modified: str | None = None
    content_hash: str | None = None
    links: tuple[str, ...] = ()


@dataclass(frozen=True)
class CrawlPage:
    """A page fetched (status 2xx) or confirmed unchanged (status 304, empty ``body``)."""

    url: str
    key: str
    requested_url: str
    depth: int
    status: int
    content_type: str
    charset: str | None
    body: bytes
    etag: str | None
    last_modified: str | None
    content_hash: str
    unchanged: bool
    links: tuple[str, ...]


@dataclass(frozen=True)
class CrawlFailure:
    """A URL that produced no page; the crawl goes on.

    ``skipped`` is True for a deliberate skip (robots.txt, content type, size, scope,
    policy) and False for an error; ``gone`` is True when the server says the page no
    longer exists (404 or 410).
    """

    url: str
    reason: str
    skipped: bool
    status: int | None = None
    depth: int = 0
    gone: bool = False


@dataclass(frozen=True)
class CrawlSummary:
    """How a crawl went; ``complete`` is what allows forgetting pages not in ``seen``.

    ``limits`` says, one sentence each, which bound cut the crawl short (``crawl stopped
    after 600 s (max_time)``, the sitemap cap, the frontier cap); a crawl with any is not
    complete. ``bytes`` counts body bytes as downloaded (before decompression).
    ``off_origin`` counts the URLs sitemaps listed on another origin, left out of a
    same-origin crawl: ``(origin, count)``, the most first.
    """

    complete: bool
    seen: frozenset[str]
    pages: int
    unchanged: int
    failures: int
    skipped: int
    bytes: int
    seconds: float
    mode: str
    limits: tuple[str, ...] = ()
    off_origin: tuple[tuple[str, int], ...] = ()
