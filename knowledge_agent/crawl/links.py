"""The links of an HTML page: ``a[href]`` and ``area[href]``, resolved and normalised.

The standard library's ``html.parser`` is enough to find two tags and is several times
faster than building a BeautifulSoup tree for every page of a crawl.
"""

from __future__ import annotations

import contextlib
import logging
import re
from html.parser import HTMLParser

from knowledge_agent.crawl.urls import normalize_url
from knowledge_agent.processors.encoding import decode_bytes

__all__ = ["decode_html", "extract_links"]

logger = logging.getLogger(__name__)

_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([\w.:-]+)""", re.IGNORECASE)
_LINK_TAGS = frozenset({"a", "area"})


class _LinkParser(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.hrefs: list[str] = []
        self.base: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _LINK_TAGS:
            href = _attribute(attrs, "href")
            if href is not None:
                self.hrefs.append(href)
        elif tag == "base" and self.base is None:
            # The first <base href> sets the document's base URL, wherever the links are.
            self.base = _attribute(attrs, "href")


def _attribute(attrs: list[tuple[str, str | None]], name: str) -> str | None:
    for key, value in attrs:
        if key == name and value is not None:
            return value
    return None


def decode_html(body: bytes, charset: str | None) -> str:
    """The text of an HTML body: a byte-order mark, UTF-8, the header or ``<meta>``
    charset, then a guess (never raises)."""
    declared = charset
    if declared is None:
        match = _META_CHARSET.search(body[:4096])
        declared = match.group(1).decode("ascii", "replace") if match else None
    text, _ = decode_bytes(body, declared=declared)
    return text


def extract_links(body: bytes, url: str, charset: str | None = None) -> tuple[str, ...]:
    """Every http(s) link of the page at ``url``, normalised, once each, in page order."""
    parser = _LinkParser()
    try:
        parser.feed(decode_html(body, charset))
        parser.close()
    except Exception:  # html.parser is lenient, but a page must never stop a crawl
        logger.debug("could not finish parsing the links of %s", url, exc_info=True)
    base = url
    if parser.base:
        # A base that is not http(s) is ignored, as browsers ignore a bad one.
        with contextlib.suppress(ValueError):
            base = normalize_url(parser.base, url)
    links: dict[str, None] = {}
    for href in parser.hrefs:
        try:
            links.setdefault(normalize_url(href, base), None)
        except ValueError:
            continue  # mailto:, javascript:, tel:, a bad port ...
    return tuple(links)
