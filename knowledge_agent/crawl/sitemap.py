"""Sitemaps (sitemaps.org): the page URLs of a ``urlset``, the sitemaps of a ``sitemapindex``."""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass
from xml.etree import ElementTree

__all__ = [
    "MAX_SITEMAP_BYTES",
    "MAX_SITEMAP_NESTING",
    "Sitemap",
    "gunzip",
    "is_gzip",
    "parse_sitemap",
]

MAX_SITEMAP_BYTES = 50 * 1024 * 1024
"""The protocol's limit for one sitemap, uncompressed."""
MAX_SITEMAP_NESTING = 3
"""Sitemap indexes are followed this many levels below the first sitemap."""

SITEMAP_ROOTS = frozenset({"urlset", "sitemapindex"})
_GZIP_MAGIC = b"\x1f\x8b"
# A sitemap needs no entities; refusing them keeps entity expansion bombs out of the parser.
_ENTITY = re.compile(rb"<!ENTITY", re.IGNORECASE)


@dataclass(frozen=True)
class Sitemap:
    """A parsed sitemap: ``kind`` is ``"urlset"`` (pages) or ``"sitemapindex"`` (sitemaps)."""

    kind: str
    locs: tuple[str, ...]


def is_gzip(body: bytes) -> bool:
    return body.startswith(_GZIP_MAGIC)


def gunzip(body: bytes, limit: int = MAX_SITEMAP_BYTES) -> bytes:
    """Decompress a gzip file, raising ``ValueError`` past ``limit`` bytes of output."""
    decompressor = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        data = decompressor.decompress(body, limit + 1)
    except zlib.error as exc:
        raise ValueError(f"bad gzip data: {exc}") from None
    if len(data) > limit:
        raise ValueError(f"larger than {limit:,} bytes uncompressed")
    return data


def parse_sitemap(body: bytes) -> Sitemap:
    """The ``<loc>`` values of a sitemap or sitemap index (gzip or not).

    Raises ``ValueError`` when ``body`` is not well-formed XML or its root is neither
    ``urlset`` nor ``sitemapindex``.
    """
    if is_gzip(body):
        body = gunzip(body)
    if _ENTITY.search(body):
        raise ValueError("sitemap declares XML entities")
    try:
        root = ElementTree.fromstring(body)
    except ElementTree.ParseError as exc:
        raise ValueError(f"not well-formed XML: {exc}") from None
    kind = _local(root.tag)
    if kind not in SITEMAP_ROOTS:
        raise ValueError(f"not a sitemap: the root element is <{kind}>")
    entry = "url" if kind == "urlset" else "sitemap"
    locs: list[str] = []
    for child in root:
        if _local(child.tag) != entry:
            continue
        for field in child:
            if _local(field.tag) == "loc" and field.text and field.text.strip():
                locs.append(field.text.strip())
                break
    return Sitemap(kind, tuple(locs))


def _local(tag: object) -> str:
    text = tag if isinstance(tag, str) else ""
    return text.rsplit("}", 1)[-1]
