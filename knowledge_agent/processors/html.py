"""HTML pages: the main content without page chrome, as Markdown-like text."""

from __future__ import annotations

import re
import warnings
from typing import TYPE_CHECKING, Any

from knowledge_agent.processors.base import BaseDataSourceProcessor, Extraction, file_stem
from knowledge_agent.processors.encoding import decode_bytes

if TYPE_CHECKING:
    from bs4 import BeautifulSoup

__all__ = ["MAX_TREE_DEPTH", "TREE_LIMIT", "HtmlProcessor", "declared_charset"]

TREE_LIMIT = 1 << 20
"""Pages of more characters than this are converted in one pass, without a tree."""
MAX_TREE_DEPTH = 128
"""Pages nested deeper than this are converted in one pass too: the tree conversion
recurses once per level."""

_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([\w.:-]+)""", re.IGNORECASE)
_SPACES = re.compile(r"\s+")


class HtmlProcessor(BaseDataSourceProcessor):
    """HTML parsed with ``html.parser``.

    Title: ``<title>``, else the first ``<h1>``, else the file stem. Content: ``<main>``
    (or a single ``<article>``, or ``[role=main]``, or ``<body>``) without navigation,
    headers, footers, sidebars, scripts and forms, converted by
    :func:`~knowledge_agent.processors.html_markdown.to_markdown`. Pages over
    :data:`TREE_LIMIT` characters or nested deeper than :data:`MAX_TREE_DEPTH` are
    converted by :func:`~knowledge_agent.processors.html_stream.stream_markdown`, whose
    memory is bounded by the text and whose time does not grow with depth.
    """

    name = "html"
    extensions = frozenset({".html", ".htm", ".xhtml"})
    source_type = "html"
    content_type = "text/html"

    def extract(self, data: bytes, path: str) -> Extraction:
        # BeautifulSoup is imported on first use: a tenth of the package's import time,
        # which opening a knowledge base and searching never need.
        from bs4 import BeautifulSoup, Tag, XMLParsedAsHTMLWarning

        from knowledge_agent.processors.html_markdown import (
            main_content,
            strip_page_chrome,
            to_markdown,
        )

        text, encoding = decode_bytes(data, declared=declared_charset(data))
        if len(text) > TREE_LIMIT:
            return _streamed(text, encoding, path)
        with warnings.catch_warnings():
            # XHTML served as HTML is fine for html.parser; the warning is noise here.
            warnings.simplefilter("ignore", XMLParsedAsHTMLWarning)
            soup = BeautifulSoup(text, "html.parser")
        if _deeper_than(soup, MAX_TREE_DEPTH):
            soup.decompose()
            return _streamed(text, encoding, path)
        metadata: dict[str, Any] = {"encoding": encoding}
        description = _meta_content(soup, "description")
        if description:
            metadata["description"] = description
        title = _title(soup)
        root = main_content(soup)
        if not title:
            h1 = root.find("h1") or soup.find("h1")
            title = _clean(h1.get_text()) if isinstance(h1, Tag) else ""
        strip_page_chrome(root)
        content = to_markdown(root)
        return Extraction(content=content, title=title or file_stem(path), metadata=metadata)


def _streamed(text: str, encoding: str, path: str) -> Extraction:
    from knowledge_agent.processors.html_stream import stream_markdown

    page = stream_markdown(text)
    metadata: dict[str, Any] = {"encoding": encoding}
    if page.description:
        metadata["description"] = page.description
    title = page.title or page.first_h1 or file_stem(path)
    return Extraction(content=page.content, title=title, metadata=metadata)


def _deeper_than(soup: BeautifulSoup, limit: int) -> bool:
    """Whether any element is nested more than ``limit`` deep (walked without recursion)."""
    from bs4 import Tag

    depth: dict[int, int] = {id(soup): 0}
    for tag in soup.descendants:
        if isinstance(tag, Tag):
            level = depth[id(tag.parent)] + 1
            if level > limit:
                return True
            depth[id(tag)] = level
    return False


def declared_charset(data: bytes) -> str | None:
    """The charset a ``<meta>`` tag near the top declares, if any."""
    match = _META_CHARSET.search(data[:4096])
    return match.group(1).decode("ascii", "replace") if match else None


def _title(soup: BeautifulSoup) -> str:
    from bs4 import Tag

    tag = soup.find("title")
    return _clean(tag.get_text()) if isinstance(tag, Tag) else ""


def _meta_content(soup: BeautifulSoup, name: str) -> str:
    from bs4 import Tag

    for attrs in ({"name": name}, {"property": f"og:{name}"}):
        tag = soup.find("meta", attrs=attrs)
        if isinstance(tag, Tag):
            value = tag.get("content")
            if isinstance(value, str) and value.strip():
                return _clean(value)
    return ""


def _clean(text: str) -> str:
    return _SPACES.sub(" ", text).strip()
