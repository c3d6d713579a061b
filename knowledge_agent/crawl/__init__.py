"""Fetch documentation from the web: one page, a sitemap, or a site crawled breadth first.

This package is the network layer only; it never touches storage. httpx (the ``web``
extra) is imported when a :class:`Crawler` is built, not when this package is imported.

Errors: a bad option or start URL raises :class:`~knowledge_agent.errors.ConfigError`
(also when httpx is missing); every per-URL problem is yielded as a
:class:`CrawlFailure` and the crawl goes on.
"""

from __future__ import annotations

import typing as _typing

from knowledge_agent.crawl.options import CrawlOptions
from knowledge_agent.crawl.policy import UrlPolicy
from knowledge_agent.crawl.results import CrawlFailure, CrawlPage, CrawlSummary, KnownPage
from knowledge_agent.crawl.urls import anchor_url, normalize_url, url_key

if _typing.TYPE_CHECKING:
    from knowledge_agent.crawl.content import select_content
    from knowledge_agent.crawl.crawler import Crawler

__all__ = [
    "CrawlFailure",
    "CrawlOptions",
    "CrawlPage",
    "CrawlSummary",
    "Crawler",
    "KnownPage",
    "UrlPolicy",
    "anchor_url",
    "normalize_url",
    "select_content",
    "url_key",
]


def __getattr__(name: str) -> _typing.Any:
    # The crawler and the content selection load the processors and urllib.request: only
    # when a crawl runs, so the command line and the options start fast.
    if name == "Crawler":
        from knowledge_agent.crawl.crawler import Crawler

        return Crawler
    if name == "select_content":
        from knowledge_agent.crawl.content import select_content

        return select_content
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
