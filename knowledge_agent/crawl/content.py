"""Keep the part of an HTML page that is the documentation, drop the chrome around it."""

from __future__ import annotations

import html
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING

from knowledge_agent.crawl.links import decode_html
from knowledge_agent.crawl.options import check_selector

if TYPE_CHECKING:
    from bs4 import BeautifulSoup, Tag

__all__ = ["select_content"]


def select_content(
    body: bytes,
    charset: str | None,
    content_selector: str | None,
    drop_selectors: Sequence[str],
) -> bytes:
    """A UTF-8 HTML document holding the page's ``<title>`` and only the elements that
    match ``content_selector`` (the whole ``<body>`` when it is ``None`` or matches
    nothing), with every match of ``drop_selectors`` removed first.

    Attributes are kept, so heading ``id`` values survive as anchors. Raises
    :class:`~knowledge_agent.errors.ConfigError` for a selector that is not valid CSS.
    """
    from bs4 import BeautifulSoup, XMLParsedAsHTMLWarning

    if content_selector is not None:
        check_selector("content_selector", content_selector)
    for selector in drop_selectors:
        check_selector("drop_selectors", selector)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", XMLParsedAsHTMLWarning)
        soup = BeautifulSoup(decode_html(body, charset), "html.parser")
    title = _title(soup)
    for selector in drop_selectors:
        for element in soup.select(selector):
            element.decompose()
    parts = _selected(soup, content_selector)
    return _document(soup, title, parts).encode("utf-8")


def _title(soup: BeautifulSoup) -> str | None:
    tag = soup.find("title")
    return tag.get_text() if tag is not None else None


def _selected(soup: BeautifulSoup, content_selector: str | None) -> list[str]:
    if content_selector is not None:
        matches = _outermost(soup.select(content_selector))
        if matches:
            return [str(match) for match in matches]
    body = soup.find("body")
    if body is not None:
        return [body.decode_contents()]
    # A fragment without <body>: everything but the <head>.
    head = soup.find("head")
    if head is not None:
        head.decompose()
    return [soup.decode_contents()]


def _outermost(matches: list[Tag]) -> list[Tag]:
    """``matches`` without those inside another match (which would be kept twice)."""
    chosen = {id(match) for match in matches}
    return [match for match in matches if not any(id(parent) in chosen for parent in match.parents)]


def _document(soup: BeautifulSoup, title: str | None, parts: list[str]) -> str:
    html_tag = soup.find("html")
    lang = html_tag.get("lang") if html_tag is not None else None
    lang_attr = f' lang="{html.escape(lang)}"' if isinstance(lang, str) and lang else ""
    head = ['<meta charset="utf-8">']
    if title is not None:
        head.append(f"<title>{html.escape(title, quote=False)}</title>")
    return (
        f"<!DOCTYPE html>\n<html{lang_attr}><head>{''.join(head)}</head>"
        f"<body>\n{chr(10).join(parts)}\n</body></html>\n"
    )
