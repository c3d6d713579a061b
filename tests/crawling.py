"""Helpers of the crawler tests (no tests of its own): run a crawl, sort its events."""

from __future__ import annotations

from urllib.parse import urlsplit

from knowledge_agent.crawl import Crawler, CrawlFailure, CrawlOptions, CrawlPage

__all__ = ["Event", "failures", "pages", "run"]

Event = CrawlPage | CrawlFailure


def run(
    start: str, options: CrawlOptions | None = None, **kwargs: object
) -> tuple[list[Event], Crawler]:
    """Every event of a crawl of ``start``, and the crawler (for its summary)."""
    with Crawler(start, options, **kwargs) as crawler:  # type: ignore[arg-type]
        events = list(crawler)
    return events, crawler


def pages(events: list[Event]) -> dict[str, CrawlPage]:
    """The pages crawled, by URL path."""
    return {urlsplit(e.url).path: e for e in events if isinstance(e, CrawlPage)}


def failures(events: list[Event]) -> dict[str, CrawlFailure]:
    """The failures and skips, by URL path."""
    return {urlsplit(e.url).path: e for e in events if isinstance(e, CrawlFailure)}
