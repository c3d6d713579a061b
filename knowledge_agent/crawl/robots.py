"""robots.txt rules per origin, parsed by ``urllib.robotparser``.

The standard library parser matches path prefixes in file order; it knows neither the
``*`` and ``$`` wildcards nor longest-match precedence, so such rules are read literally.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from urllib.robotparser import RobotFileParser

__all__ = [
    "MAX_CRAWL_DELAY",
    "MAX_ROBOTS_BYTES",
    "RobotsCache",
    "RobotsRules",
    "allow_all",
    "parse_robots",
]

logger = logging.getLogger(__name__)

MAX_ROBOTS_BYTES = 512 * 1024
"""Google reads the first 500 KiB of a robots.txt; rules past that are ignored."""
MAX_CRAWL_DELAY = 60.0
"""A longer Crawl-delay is capped: an hour per page would never finish a documentation site."""


@dataclass(frozen=True)
class RobotsRules:
    """The rules of one origin's robots.txt for our user agent (``parser=None``: allow all)."""

    parser: RobotFileParser | None
    user_agent: str

    def allows(self, url: str) -> bool:
        return self.parser is None or self.parser.can_fetch(self.user_agent, url)

    @property
    def crawl_delay(self) -> float:
        if self.parser is None:
            return 0.0
        delay = self.parser.crawl_delay(self.user_agent)
        if delay is None:
            return 0.0
        return min(float(delay), MAX_CRAWL_DELAY)


def parse_robots(text: str, user_agent: str) -> RobotsRules:
    """The rules ``text`` (a robots.txt body) sets for ``user_agent``."""
    parser = RobotFileParser()
    parser.parse(text.splitlines())
    return RobotsRules(parser, user_agent)


def allow_all(user_agent: str) -> RobotsRules:
    return RobotsRules(None, user_agent)


class RobotsCache:
    """robots.txt fetched once per origin, even when several threads ask at once."""

    def __init__(self, load: Callable[[str], RobotsRules]) -> None:
        self._load = load
        self._rules: dict[str, RobotsRules] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    def rules(self, origin: str) -> RobotsRules:
        """The rules of ``origin`` (``scheme://host[:port]``), loading them on first use."""
        with self._guard:
            cached = self._rules.get(origin)
            if cached is not None:
                return cached
            lock = self._locks.setdefault(origin, threading.Lock())
        # Other threads wanting this origin wait here for the one fetch rather than repeat it.
        with lock:
            with self._guard:
                cached = self._rules.get(origin)
            if cached is not None:
                return cached
            rules = self._load(origin)
            with self._guard:
                self._rules[origin] = rules
            return rules
