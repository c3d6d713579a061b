"""Sitemaps (sitemaps.org): the page URLs of a ``urlset``, the sitemaps of a ``sitemapindex``.

A sitemap comes from a stranger, so :class:`SitemapParser` is fed the body as it arrives
and keeps only what the crawl can use: it unpacks gzip a step at a time under a cap on
the XML bytes, parses with expat (any encoding expat knows: UTF-8, UTF-16 with a BOM,
Latin-1), refuses entity declarations in the parser itself, and stops once it holds as
many URLs as it was asked for or has seen :data:`MAX_SITEMAP_LOCS`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from xml.parsers import expat

from knowledge_agent.crawl.decode import Decoder

__all__ = [
    "MAX_LOC_CHARS",
    "MAX_SITEMAPS",
    "MAX_SITEMAP_BYTES",
    "MAX_SITEMAP_LOCS",
    "MAX_SITEMAP_NESTING",
    "NotASitemap",
    "Sitemap",
    "SitemapParser",
    "parse_sitemap",
]

MAX_SITEMAP_BYTES = 50 * 1024 * 1024
"""The protocol's limit for one sitemap, uncompressed."""
MAX_SITEMAP_LOCS = 50_000
"""The protocol's limit of URLs in one sitemap; reading stops there."""
MAX_SITEMAP_NESTING = 3
"""Sitemap indexes are followed this many levels below the first sitemap."""
MAX_SITEMAPS = 50
"""Sitemaps fetched in one crawl at most; a crawl that lists more is incomplete."""
MAX_LOC_CHARS = 4096
"""A longer ``<loc>`` is dropped (the protocol allows fewer than 2,048 characters)."""

SITEMAP_ROOTS = frozenset({"urlset", "sitemapindex"})
_ENTRY = {"urlset": "url", "sitemapindex": "sitemap"}
_GZIP_MAGIC = b"\x1f\x8b"

Keep = Callable[[str, str], str | None]
"""``(kind, loc) -> the URL to keep, or None to drop the loc``."""


class NotASitemap(ValueError):
    """Well-formed XML whose root is neither ``urlset`` nor ``sitemapindex``."""


@dataclass(frozen=True)
class Sitemap:
    """A parsed sitemap: ``kind`` is ``"urlset"`` (pages) or ``"sitemapindex"`` (sitemaps).

    ``truncated``: reading stopped before the end (enough URLs, or the protocol's limit),
    so the sitemap may list more than ``locs``.
    """

    kind: str
    locs: tuple[str, ...]
    truncated: bool = False


class _Refused(Exception):
    """Raised inside an expat handler to abandon the document."""


class SitemapParser:
    """An incremental sitemap parser: :meth:`feed` the body, then :meth:`close`.

    ``keep`` turns each ``<loc>`` into the URL to keep (or drops it); ``max_urls`` and
    ``max_sitemaps`` bound the URLs kept from a ``urlset`` and a ``sitemapindex``. The
    parser stops at one more than that (so it knows the sitemap lists more) or after
    :data:`MAX_SITEMAP_LOCS` locs. ``max_bytes`` bounds the XML bytes parsed, after gzip.
    """

    def __init__(
        self,
        *,
        keep: Keep | None = None,
        max_urls: int = MAX_SITEMAP_LOCS,
        max_sitemaps: int = MAX_SITEMAP_LOCS,
        max_bytes: int = MAX_SITEMAP_BYTES,
    ) -> None:
        self.max_bytes = max_bytes
        self._keep = keep or (lambda _kind, loc: loc)
        self._limits = {"urlset": max_urls, "sitemapindex": max_sitemaps}
        self._parser = expat.ParserCreate(namespace_separator=" ")
        self._parser.SetParamEntityParsing(expat.XML_PARAM_ENTITY_PARSING_NEVER)
        self._parser.EntityDeclHandler = self._refuse_entity
        self._parser.StartElementHandler = self._start
        self._parser.EndElementHandler = self._end
        self._parser.CharacterDataHandler = self._text
        self._parser.buffer_text = True
        self._head: bytes | None = b""  # the first bytes, until they tell gzip from XML
        self._gunzip: Decoder | None = None
        self._kind: str | None = None
        self._depth = 0
        self._in_entry = False
        self._entry_done = False
        self._loc: list[str] | None = None  # text of the <loc> being read
        self._loc_chars = 0
        self._locs: list[str] = []
        self._kept: set[str] = set()
        self._seen = 0
        self._error: ValueError | None = None
        self._truncated = False
        self._closed = False
        self.bytes_parsed = 0
        """XML bytes handed to expat so far (after gzip)."""

    @property
    def done(self) -> bool:
        """Whether reading more would change nothing: enough URLs, or an error."""
        return self._truncated or self._error is not None

    def feed(self, data: bytes) -> bool:
        """Parse the next bytes of the body; True when the rest need not be read."""
        if self.done or not data:
            return self.done
        if self._head is not None:  # gzip or not is still to tell
            self._head += data
            if len(self._head) < len(_GZIP_MAGIC):
                return False
            data, self._head = self._head, None
            if data.startswith(_GZIP_MAGIC):
                self._gunzip = Decoder("gzip")
        try:
            if self._gunzip is None:
                self._parse(data)
            else:
                for piece in self._gunzip.decode(data):
                    self._parse(piece)
                    if self.done:
                        break
        except ValueError as exc:
            self._error = exc
        return self.done

    def close(self) -> Sitemap:
        """The sitemap read; ``ValueError`` (:class:`NotASitemap` for another root) when
        the body is no sitemap, not well-formed, or declares entities. Idempotent."""
        if not self._closed and self._error is None and not self._truncated:
            self._closed = True
            try:
                if self._head:
                    self._parse(self._head)  # a body shorter than the gzip magic
                self._parse(b"", final=True)
            except ValueError as exc:
                self._error = exc
        if self._error is not None:
            raise self._error
        if self._kind is None:
            raise ValueError("not well-formed XML: no element found")
        return Sitemap(self._kind, tuple(self._locs), self._truncated)

    # -- expat -----------------------------------------------------------------

    def _parse(self, data: bytes, *, final: bool = False) -> None:
        self.bytes_parsed += len(data)
        if self.bytes_parsed > self.max_bytes:
            raise ValueError(f"larger than {self.max_bytes:,} bytes uncompressed")
        try:
            self._parser.Parse(data, final)
        except _Refused as exc:
            raise ValueError(str(exc)) from None
        except expat.ExpatError as exc:
            raise ValueError(f"not well-formed XML: {exc}") from None

    def _refuse_entity(self, *_args: object) -> None:
        # A sitemap needs no entities; refusing every declaration keeps expansion bombs
        # (billion laughs, in any encoding) and external entities out.
        raise _Refused("sitemap declares XML entities")

    def _start(self, name: str, _attrs: object) -> None:
        self._depth += 1
        local = name.rsplit(" ", 1)[-1]
        if self._depth == 1:
            if local not in SITEMAP_ROOTS:
                raise NotASitemap(f"the root element is <{local}>")
            self._kind = local
        elif self._depth == 2:
            self._in_entry = self._kind is not None and local == _ENTRY[self._kind]
            self._entry_done = False
        elif self._depth == 3 and self._in_entry and not self._entry_done and local == "loc":
            self._loc = []
            self._loc_chars = 0

    def _text(self, text: str) -> None:
        if self._loc is None:
            return
        self._loc_chars += len(text)
        if self._loc_chars <= MAX_LOC_CHARS:
            self._loc.append(text)

    def _end(self, _name: str) -> None:
        if self._depth == 3 and self._loc is not None:
            parts, self._loc = self._loc, None
            self._entry_done = True
            if self._loc_chars <= MAX_LOC_CHARS:
                self._found("".join(parts).strip())
        self._depth -= 1

    def _found(self, loc: str) -> None:
        if not loc or self._truncated or self._kind is None:
            return
        self._seen += 1
        if self._seen > MAX_SITEMAP_LOCS:
            self._truncated = True
            return
        url = self._keep(self._kind, loc)
        if url is None or url in self._kept:
            return
        if len(self._locs) >= self._limits[self._kind]:
            self._truncated = True
            return
        self._kept.add(url)
        self._locs.append(url)


def parse_sitemap(body: bytes, *, max_bytes: int = MAX_SITEMAP_BYTES) -> Sitemap:
    """The ``<loc>`` values of a whole sitemap or sitemap index (gzip or not).

    Raises ``ValueError`` when ``body`` is not well-formed XML, declares entities, or its
    root is neither ``urlset`` nor ``sitemapindex``.
    """
    parser = SitemapParser(max_bytes=max_bytes)
    parser.feed(body)
    return parser.close()
