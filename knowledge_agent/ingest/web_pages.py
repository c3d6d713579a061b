"""A fetched web page as a processed document, each chunk pointing at its URL and section.

The page goes through the processor of its media type (HTML, Markdown, text, PDF); an
HTML page first loses what the crawl options drop and keeps what they select. Every chunk
gets ``url`` (``page#anchor`` of the nearest heading before it that has an ``id``, else
the page) and ``anchor`` in its metadata, so a citation opens the right section.
"""

from __future__ import annotations

import bisect
import posixpath
import re
from collections.abc import Sequence
from html import unescape
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from knowledge_agent.analysis import detect_language
from knowledge_agent.chunking import ChunkConfig
from knowledge_agent.crawl.urls import anchor_url
from knowledge_agent.errors import IngestError, UnsupportedSourceError
from knowledge_agent.processors import ProcessedDocument, process_bytes
from knowledge_agent.processors.encoding import decode_bytes
from knowledge_agent.processors.html import declared_charset

if TYPE_CHECKING:
    from knowledge_agent.crawl import CrawlOptions, CrawlPage

__all__ = ["page_anchors", "page_document"]

# The name a page is processed under: its media type picks the processor.
_SUFFIXES = {
    "text/html": ".html",
    "application/xhtml+xml": ".xhtml",
    "text/markdown": ".md",
    "text/x-markdown": ".md",
    "text/x-rst": ".rst",
    "text/plain": ".txt",
    "application/pdf": ".pdf",
}
_ANCHOR_TAGS = re.compile(r"<(/?)(h[1-6]|section|a)\b([^>]*)>", re.IGNORECASE)
_TAGS = re.compile(r"<[^>]*>")
_MARKDOWN_HEADING = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t]*$", re.MULTILINE)
_FENCE = re.compile(r"^[ \t]*(```|~~~)", re.MULTILINE)
_NON_WORDS = re.compile(r"\W+")


def page_document(page: CrawlPage, options: CrawlOptions, config: ChunkConfig) -> ProcessedDocument:
    """Extract and chunk ``page``, and tell its language (when the processor did not);
    ``IngestError`` (naming the URL) when it cannot be. Needs no storage: a crawl runs it
    outside any lock."""
    suffix = _SUFFIXES.get(page.content_type)
    if suffix is None:
        raise UnsupportedSourceError(page.url, f"unsupported content type {page.content_type}")
    data = page.body
    anchors: list[tuple[str, str]] = []
    if suffix in (".html", ".xhtml"):
        if options.content_selector or options.drop_selectors:
            from knowledge_agent.crawl import select_content

            data = select_content(
                data, page.charset, options.content_selector, options.drop_selectors
            )
        elif page.charset and declared_charset(data) is None:
            # The processor reads <meta charset>; the header's charset must not be lost.
            data = decode_bytes(data, declared=page.charset)[0].encode("utf-8")
        anchors = page_anchors(data)
    try:
        document = process_bytes(data, _page_name(page.url, suffix), config)
    except IngestError as exc:
        raise type(exc)(page.url, exc.reason) from exc
    _point_chunks(document, page.url, anchors)
    document.language = document.language or detect_language(document.content)
    return document


def page_anchors(html: bytes) -> list[tuple[str, str]]:
    """``(heading words, anchor)`` of every heading with an id, in page order.

    The anchor is the heading's ``id``, else that of a link inside it (``<a id>`` or
    ``<a name>``), else that of the ``<section>`` it opens (Sphinx puts ids there). A scan
    of the tags that matter, not a parse: a second parse of every page cost as much as
    extracting it.
    """
    text = decode_bytes(html, declared=declared_charset(html))[0]
    found: list[tuple[str, str]] = []
    section = ""  # the id of a <section> whose first heading has not come yet
    heading: tuple[int, str] | None = None  # where the open heading's text starts, its anchor
    for tag in _ANCHOR_TAGS.finditer(text):
        closing, name, attributes = tag.group(1), tag.group(2).lower(), tag.group(3)
        if name == "section":
            section = "" if closing else _attribute(attributes, "id")
        elif name == "a":
            if heading is not None and not heading[1] and not closing:
                anchor = _attribute(attributes, "id") or _attribute(attributes, "name")
                heading = (heading[0], anchor)
        elif not closing:
            heading = (tag.end(), _attribute(attributes, "id") or section)
            section = ""
        elif heading is not None:
            words = _words(unescape(_TAGS.sub(" ", text[heading[0] : tag.start()])))
            if heading[1] and words:
                found.append((words, heading[1]))
            heading = None
    return found


def _attribute(attributes: str, name: str) -> str:
    match = re.search(
        rf"""(?:^|\s){name}\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s"'>]+))""", attributes, re.I
    )
    return unescape(next(g for g in match.groups() if g is not None)).strip() if match else ""


def _words(text: str) -> str:
    """Heading text compared without markup, permalink signs and case."""
    return _NON_WORDS.sub(" ", text).strip().lower()


def _point_chunks(
    document: ProcessedDocument, url: str, anchors: Sequence[tuple[str, str]]
) -> None:
    """Give every chunk the URL of the nearest heading with an anchor before it, and the
    anchored headings inside it (``anchors``: ``[offset in the chunk, anchor]``), so a
    passage deeper in the chunk links to its own section."""
    located = _anchored_headings(document.content, anchors)
    for chunk in document.chunks:
        anchor = None
        inside = []
        for position, name in located:
            if position >= chunk.end_position:
                break
            if position > chunk.start_position:
                inside.append([position - chunk.start_position, name])
            else:
                anchor = name
        chunk.metadata["url"] = anchor_url(url, anchor)
        chunk.metadata["anchor"] = anchor or ""
        if inside:
            chunk.metadata["anchors"] = inside


def _anchored_headings(content: str, anchors: Sequence[tuple[str, str]]) -> list[tuple[int, str]]:
    """``(position, anchor)`` of the Markdown headings of ``content`` matched, in order, to
    the page's anchored headings (headings inside fenced code are not headings)."""
    fences = [match.start() for match in _FENCE.finditer(content)]
    located: list[tuple[int, str]] = []
    next_anchor = 0
    for match in _MARKDOWN_HEADING.finditer(content):
        if bisect.bisect_left(fences, match.start()) % 2:
            continue
        words = _words(match.group(1))
        for index in range(next_anchor, len(anchors)):
            if anchors[index][0] == words:
                located.append((match.start(), anchors[index][1]))
                next_anchor = index + 1
                break
    return located


def _page_name(url: str, suffix: str) -> str:
    """A file name for the page: the last part of its path with the media type's suffix."""
    parts = urlsplit(url)
    stem = posixpath.basename(parts.path.rstrip("/")) or parts.hostname or "index"
    root, extension = posixpath.splitext(stem)
    return (root if extension.lower() in _SUFFIXES.values() else stem) + suffix
