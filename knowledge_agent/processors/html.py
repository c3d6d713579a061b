"""HTML pages: the main content without page chrome, as Markdown-like text."""

from __future__ import annotations

import re
import warnings
from typing import TYPE_CHECKING, Any

from knowledge_agent.processors.base import BaseDataSourceProcessor, Extraction, file_stem
from knowledge_agent.processors.encoding import decode_bytes

if TYPE_CHECKING:
    from bs4 import BeautifulSoup

__all__ = ["HtmlProcessor", "declared_charset"]

_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([\w.:-]+)""", re.IGNORECASE)
_SPACES = re.compile(r"\s+")


class HtmlProcessor(BaseDataSourceProcessor):
    """HTML parsed with ``html.parser``.

    Title: ``<title>``, else the first ``<h1>``, else the file stem. Content: ``<main>``
    (or a single ``<article>``, or ``[role=main]``, or ``<body>``) without navigation,
    headers, footers, sidebars, scripts and forms, converted by
    :func:`~knowledge_agent.processors.html_markdown.to_markdown`.
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
        with warnings.catch_warnings():
            # XHTML served as HTML is fine for html.parser; the warning is noise here.
            warnings.simplefilter("ignore", XMLParsedAsHTMLWarning)
            soup = BeautifulSoup(text, "html.parser")
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
