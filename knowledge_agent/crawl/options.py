"""What a crawl may do: :class:`CrawlOptions`, validated when built, JSON round-trippable."""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from knowledge_agent.errors import ConfigError
from knowledge_agent.patterns import MAX_GLOB_CHARS

__all__ = ["MAX_CONCURRENCY", "CrawlOptions", "default_user_agent"]

MAX_CONCURRENCY = 64
"""More worker threads than this would only hammer a server and the machine."""


@functools.lru_cache(maxsize=1)
def default_user_agent() -> str:
    """``knowledge-agent/<version> (+offline knowledge base)``."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        release = version("knowledge-agent")
    except PackageNotFoundError:  # running from a source tree that is not installed
        release = "0"
    return f"knowledge-agent/{release} (+offline knowledge base)"


@dataclass(frozen=True, kw_only=True)
class CrawlOptions:
    """How far and how politely a crawl goes, and what it keeps of each page.

    Lists are accepted for the tuple fields and a mapping for ``headers``; every field is
    checked and a bad value raises :class:`~knowledge_agent.errors.ConfigError` naming it.
    ``timeout`` bounds each request (each redirect hop) from connecting to its last body
    byte; ``max_time`` the whole crawl, which then stops and counts as incomplete.
    ``allow_private`` lets a crawl without a URL policy of its own follow redirects, links
    and sitemap entries to private and loopback addresses other than the start URL's host.
    """

    max_depth: int = 3
    max_pages: int = 500
    same_origin: bool = True
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    delay: float = 0.0
    timeout: float = 15.0
    max_time: float = 600.0
    concurrency: int = 4
    user_agent: str = field(default_factory=default_user_agent)
    headers: tuple[tuple[str, str], ...] = ()
    follow_redirects: bool = True
    max_redirects: int = 10
    content_selector: str | None = None
    drop_selectors: tuple[str, ...] = ()
    max_page_bytes: int = 5 * 1024 * 1024
    respect_robots: bool = True
    allow_private: bool = False

    def __post_init__(self) -> None:
        _check_int(self, "max_depth", minimum=0)
        _check_int(self, "max_pages", minimum=1)
        _check_int(self, "concurrency", minimum=1, maximum=MAX_CONCURRENCY)
        _check_int(self, "max_redirects", minimum=0)
        _check_int(self, "max_page_bytes", minimum=1)
        _check_number(self, "delay", positive=False)
        _check_number(self, "timeout", positive=True)
        _check_number(self, "max_time", positive=True)
        for name in ("same_origin", "follow_redirects", "respect_robots", "allow_private"):
            if not isinstance(getattr(self, name), bool):
                _bad(name, getattr(self, name), "must be true or false")
        for name in ("include", "exclude", "drop_selectors"):
            object.__setattr__(self, name, _strings(name, getattr(self, name)))
        for name in ("include", "exclude"):
            for glob in getattr(self, name):
                if len(glob) > MAX_GLOB_CHARS:
                    _bad(name, f"{glob[:40]}…", f"is longer than {MAX_GLOB_CHARS} characters")
        object.__setattr__(self, "headers", _headers(self.headers))
        if not isinstance(self.user_agent, str) or not self.user_agent.strip():
            _bad("user_agent", self.user_agent, "must be a non-empty string")
        if _has_line_break(self.user_agent):
            _bad("user_agent", self.user_agent, "must be one line")
        if self.content_selector is not None:
            if not isinstance(self.content_selector, str) or not self.content_selector.strip():
                _bad("content_selector", self.content_selector, "must be a CSS selector")
            check_selector("content_selector", self.content_selector)
        for selector in self.drop_selectors:
            check_selector("drop_selectors", selector)

    def to_dict(self) -> dict[str, Any]:
        """The options as JSON-safe values (tuples become lists)."""
        data: dict[str, Any] = {}
        for item in dataclasses.fields(self):
            value = getattr(self, item.name)
            if item.name == "headers":
                value = [[name, text] for name, text in value]
            elif isinstance(value, tuple):
                value = list(value)
            data[item.name] = value
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CrawlOptions:
        """Options from :meth:`to_dict` output (missing keys take their defaults)."""
        if not isinstance(data, Mapping):
            raise ConfigError(f"crawl options must be a mapping, not {type(data).__name__}")
        names = {item.name for item in dataclasses.fields(cls)}
        for key in data:
            if key not in names:
                raise ConfigError(f"unknown crawl option {key!r}")
        return cls(**dict(data))


def check_selector(option: str, selector: str) -> None:
    """Raise ConfigError when ``selector`` is not a CSS selector soupsieve can compile."""
    import soupsieve

    try:
        soupsieve.compile(selector)
    # NotImplementedError: pseudo-elements and at-rules, which soupsieve cannot match.
    except (soupsieve.SelectorSyntaxError, NotImplementedError, TypeError, ValueError) as exc:
        raise ConfigError(f"{option}: bad CSS selector {selector!r}: {exc}") from exc


def _bad(name: str, value: object, why: str) -> None:
    raise ConfigError(f"crawl option {name}={value!r} {why}")


def _check_int(
    options: CrawlOptions, name: str, *, minimum: int, maximum: int | None = None
) -> None:
    value = getattr(options, name)
    # bool is an int subclass; True for a page count is a mistake, not a number.
    if isinstance(value, bool) or not isinstance(value, int):
        _bad(name, value, "must be a whole number")
    if value < minimum:
        _bad(name, value, f"must be at least {minimum}")
    if maximum is not None and value > maximum:
        _bad(name, value, f"must be at most {maximum}")


def _check_number(options: CrawlOptions, name: str, *, positive: bool) -> None:
    value = getattr(options, name)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        _bad(name, value, "must be a finite number of seconds")
    if positive and value <= 0:
        _bad(name, value, "must be more than 0")
    if value < 0:
        _bad(name, value, "must not be negative")
    object.__setattr__(options, name, float(value))


def _strings(name: str, value: object) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)  # one glob or selector given on its own
    if not isinstance(value, Iterable):
        _bad(name, value, "must be a list of strings")
    items = tuple(value)  # type: ignore[arg-type]
    for item in items:
        if not isinstance(item, str) or not item:
            _bad(name, value, "must be a list of non-empty strings")
    return items


def _headers(value: object) -> tuple[tuple[str, str], ...]:
    pairs: Iterable[Any]
    if isinstance(value, Mapping):
        pairs = value.items()
    elif isinstance(value, Iterable) and not isinstance(value, str):
        pairs = value
    else:
        _bad("headers", value, "must be a mapping or a list of (name, value) pairs")
    result: list[tuple[str, str]] = []
    for pair in pairs:
        if isinstance(pair, str) or not isinstance(pair, Iterable):
            _bad("headers", value, "must be a mapping or a list of (name, value) pairs")
        items = tuple(pair)
        if len(items) != 2 or not all(isinstance(item, str) for item in items):
            _bad("headers", value, "must hold (name, value) pairs of strings")
        name, text = items
        if not name.strip() or _has_line_break(name) or _has_line_break(text) or ":" in name:
            _bad("headers", value, f"has a bad header {name!r}")
        result.append((name, text))
    return tuple(result)


def _has_line_break(text: str) -> bool:
    # A header value with a line break would smuggle extra headers into the request.
    return "\r" in text or "\n" in text
