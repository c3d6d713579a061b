"""Patterns from outside — regular expressions and globs that an agent, a project file or a
command line hands over — bounded in size and in matching time.

A regular expression runs on the ``regex`` module, not ``re``: it takes the same Python
syntax and can stop a match after a timeout. ``(a+)+$`` backtracks exponentially in
``re`` and would hold a thread, and the GIL, for as long as it likes; here every scan has
one budget of matching time (:class:`TextPattern`), and a pattern that overruns it is a
:class:`~knowledge_agent.errors.QueryError` naming it. A linear engine (RE2) would need
no budget but would refuse the lookarounds and backreferences people write in grep.

Globs are ``fnmatch`` patterns, refused above :data:`MAX_GLOB_CHARS`: ``fnmatch.translate``
is quadratic in runs of ``[``.
"""

from __future__ import annotations

import fnmatch
import re
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

import regex as regex_engine

from knowledge_agent.errors import QueryError

__all__ = [
    "MAX_GLOB_CHARS",
    "MAX_PATTERN_CHARS",
    "REGEX_SECONDS",
    "TextPattern",
    "check_glob",
    "glob_regex",
]

MAX_PATTERN_CHARS = 1000
"""Longest literal or regular expression a text search takes."""
MAX_GLOB_CHARS = 1000
"""Longest glob a filter, a listing or a crawl takes."""
REGEX_SECONDS = 2.0
"""Matching time one scan with a regular expression may spend, over all the text it reads."""

Match = re.Match[str] | regex_engine.Match[str]
_T = TypeVar("_T")


def check_glob(pattern: object, name: str) -> str:
    """``pattern`` if it is a string of at most :data:`MAX_GLOB_CHARS` characters, else a
    ``QueryError`` naming ``name``."""
    if not isinstance(pattern, str):
        raise QueryError(f"{name} must be a string, got {type(pattern).__name__} {pattern!r:.80}")
    if len(pattern) > MAX_GLOB_CHARS:
        raise QueryError(
            f"{name} is {len(pattern):,} characters long; at most {MAX_GLOB_CHARS:,} are allowed"
        )
    return pattern


def glob_regex(globs: Sequence[str], name: str) -> re.Pattern[str]:
    """One compiled expression matching what any of ``globs`` matches (``fnmatch`` rules,
    case-sensitive, whole string)."""
    for glob in globs:
        check_glob(glob, name)
    return re.compile("|".join(f"(?:{fnmatch.translate(glob)})" for glob in globs))


class TextPattern:
    """A literal or a regular expression to find in text, with a budget of matching time.

    Make one per scan: every :meth:`search` and :meth:`finditer` draws on the same
    ``seconds``; once they are spent, the next call raises ``QueryError``.
    """

    def __init__(
        self,
        pattern: object,
        *,
        regex: bool,
        case_sensitive: bool,
        seconds: float = REGEX_SECONDS,
    ) -> None:
        if not isinstance(pattern, str) or not pattern:
            raise QueryError("the pattern must be a non-empty string")
        if len(pattern) > MAX_PATTERN_CHARS:
            raise QueryError(
                f"the pattern is {len(pattern):,} characters long; "
                f"at most {MAX_PATTERN_CHARS:,} are allowed"
            )
        self.pattern = pattern
        self.is_regex = regex
        self._seconds = seconds
        self._left = seconds
        if not regex:  # a literal never backtracks: plain re is enough
            self._literal: re.Pattern[str] | None = re.compile(
                re.escape(pattern), 0 if case_sensitive else re.IGNORECASE
            )
            return
        self._literal = None
        try:
            self._regex = _compile(pattern, case_sensitive)
        except regex_engine.error as exc:
            raise QueryError(f"invalid regular expression {pattern!r}: {exc}") from exc

    def search(self, text: str) -> Match | None:
        """The first match in ``text``, or None."""
        if self._literal is not None:
            return self._literal.search(text)
        return self._timed(lambda timeout: self._regex.search(text, timeout=timeout))

    def finditer(self, text: str) -> Iterator[Match]:
        """Every match in ``text``, left to right."""
        if self._literal is not None:
            yield from self._literal.finditer(text)
            return
        yield from self._timed(lambda timeout: list(self._regex.finditer(text, timeout=timeout)))

    def _timed(self, run: Callable[[float], _T]) -> _T:
        if self._left <= 0:
            raise self._overrun()
        started = time.perf_counter()
        try:
            return run(self._left)
        except TimeoutError:
            self._left = 0.0
            raise self._overrun() from None
        finally:
            self._left -= time.perf_counter() - started

    def _overrun(self) -> QueryError:
        return QueryError(
            f"the regular expression {self.pattern!r:.100} took too long to match "
            f"(over {self._seconds:g} s); simplify it, e.g. avoid nested repeats like (a+)+"
        )


def _compile(pattern: str, case_sensitive: bool) -> regex_engine.Pattern[str]:
    flags = regex_engine.VERSION0
    return regex_engine.compile(pattern, flags if case_sensitive else flags | regex_engine.I)
