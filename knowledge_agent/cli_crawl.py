"""The crawl options of ``knowledge-agent add URL``: click options in, ``CrawlOptions`` out."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from knowledge_agent.crawl import CrawlOptions

__all__ = ["CRAWL_OPTION_NAMES", "crawl_options", "crawl_options_from", "given", "is_url"]

_MB = 1024 * 1024

# (flag, keyword, click settings): applied bottom-up so --help lists them in this order.
_OPTIONS: list[tuple[str, str, dict[str, Any]]] = [
    ("--depth", "depth", {"type": click.IntRange(min=0), "metavar": "N",
     "help": "URL: follow links this deep (the start page is 0; 0 = that page only). "
             "Default 3."}),
    ("--max-pages", "max_pages", {"type": click.IntRange(min=1), "metavar": "N",
     "help": "URL: fetch at most N pages. Default 500."}),
    ("--any-origin", "any_origin", {"is_flag": True,
     "help": "URL: follow links to other hosts too (default: the start URL's origin only)."}),
    ("--delay", "delay", {"type": click.FloatRange(min=0), "metavar": "SECONDS",
     "help": "URL: wait between two requests to one host. Default 0."}),
    ("--timeout", "timeout", {"type": click.FloatRange(min=0, min_open=True),
     "metavar": "SECONDS", "help": "URL: give up on a request (connecting to its last byte) "
             "after this long. Default 15."}),
    ("--max-time", "max_time", {"type": click.FloatRange(min=0, min_open=True),
     "metavar": "SECONDS", "help": "URL: stop the whole crawl after this long (it then "
             "removes no page as gone). Default 600."}),
    ("--concurrency", "concurrency", {"type": click.IntRange(min=1), "metavar": "N",
     "help": "URL: requests in flight at once. Default 4."}),
    ("--user-agent", "user_agent", {"metavar": "TEXT", "help": "URL: the User-Agent header."}),
    ("--header", "header", {"multiple": True, "metavar": "'NAME: VALUE'",
     "help": "URL: an extra request header (repeatable)."}),
    ("--no-redirects", "no_redirects", {"is_flag": True,
     "help": "URL: report redirects instead of following them."}),
    ("--selector", "selector", {"metavar": "CSS",
     "help": "URL: index only the content matching this CSS selector, e.g. 'main article'."}),
    ("--drop", "drop", {"multiple": True, "metavar": "CSS",
     "help": "URL: remove what matches this CSS selector first (repeatable)."}),
    ("--max-page-size", "max_page_size", {"type": click.FloatRange(min=0, min_open=True),
     "metavar": "MB", "help": "URL: skip pages larger than this. Default 5."}),
    ("--allow-private", "allow_private", {"is_flag": True,
     "help": "URL: follow redirects, links and sitemap entries to private and loopback "
             "addresses (default: only the start URL's own host may be one)."}),
    ("--ignore-robots", "ignore_robots", {"is_flag": True,
     "help": "URL: fetch pages robots.txt disallows (default: respect it)."}),
    ("--refresh", "refresh", {"type": click.FloatRange(min=0), "metavar": "HOURS",
     "help": "URL: `sync` crawls it again after this long (0: only when asked). Default 24."}),
    ("--name", "source_name", {"metavar": "TEXT", "help": "URL: a name for the doc source."}),
    ("--tag", "tag", {"multiple": True, "metavar": "TAG",
     "help": "URL: a tag for every page of the doc source (repeatable)."}),
]  # fmt: skip

CRAWL_OPTION_NAMES = tuple(keyword for _, keyword, _ in _OPTIONS)
"""The keyword arguments :func:`crawl_options` adds to a command."""


def crawl_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """Add the crawl options to a command (they reach it as keyword arguments)."""
    for flag, keyword, settings in reversed(_OPTIONS):
        func = click.option(flag, keyword, **settings)(func)
    return func


def is_url(text: str) -> bool:
    """Whether a command-line source is a web URL rather than a path."""
    return text[:8].lower().startswith(("http://", "https://"))


def crawl_options_from(values: Mapping[str, Any]) -> tuple[CrawlOptions, dict[str, Any]]:
    """The ``CrawlOptions`` the flags ask for, and the doc-source keywords of
    ``collect_knowledge`` (name, tags, refresh interval)."""
    fields: dict[str, Any] = {}
    for keyword, field in (
        ("depth", "max_depth"),
        ("max_pages", "max_pages"),
        ("delay", "delay"),
        ("timeout", "timeout"),
        ("max_time", "max_time"),
        ("concurrency", "concurrency"),
        ("user_agent", "user_agent"),
        ("selector", "content_selector"),
    ):
        if values.get(keyword) is not None:
            fields[field] = values[keyword]
    if values.get("any_origin"):
        fields["same_origin"] = False
    if values.get("no_redirects"):
        fields["follow_redirects"] = False
    if values.get("ignore_robots"):
        fields["respect_robots"] = False
    if values.get("allow_private"):
        fields["allow_private"] = True
    if values.get("drop"):
        fields["drop_selectors"] = tuple(values["drop"])
    if values.get("max_page_size") is not None:
        fields["max_page_bytes"] = int(values["max_page_size"] * _MB)
    if values.get("header"):
        fields["headers"] = tuple(_header(text) for text in values["header"])
    source: dict[str, Any] = {
        "name": values.get("source_name") or "",
        "tags": tuple(values.get("tag") or ()),
    }
    if values.get("refresh") is not None:
        source["refresh_interval"] = values["refresh"] * 3600.0
    from knowledge_agent.crawl import CrawlOptions  # not at import: --help and --version

    return CrawlOptions(**fields), source


def given(values: Mapping[str, Any]) -> list[str]:
    """The crawl flags that were set, as typed (for "only with a URL" errors)."""
    flags = {keyword: flag for flag, keyword, _ in _OPTIONS}
    return [flags[k] for k in CRAWL_OPTION_NAMES if values.get(k) not in (None, False, ())]


def _header(text: str) -> tuple[str, str]:
    name, colon, value = text.partition(":")
    if not colon or not name.strip():
        raise click.BadParameter(f"{text!r} is not 'NAME: VALUE'", param_hint="'--header'")
    return name.strip(), value.strip()
