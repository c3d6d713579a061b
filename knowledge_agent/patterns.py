"""Patterns from outside — regular expressions and globs that an agent, a project file or a
command line hands over — bounded in size, in compiled size and in matching time.

Text patterns, literal or regular, run on the ``regex`` module, not ``re``: it takes the
same Python syntax and can stop a match after a timeout. ``(a|aa)+$`` backtracks
exponentially and would hold a thread, and the GIL, for as long as it likes; here every
scan has one budget of matching time (:class:`TextPattern`): a few seconds, plus time in
proportion to the text it reads, so that a scan of a large knowledge base takes as long as
it must (linear in its size) and only matching that outgrows its text runs out. A pattern
that overruns it is a :class:`~knowledge_agent.errors.QueryError` naming it. A literal runs
under the same budget: a long needle searched without regard to case is no linear scan
either. A linear engine (RE2) would need no budget but would refuse the lookarounds and
backreferences people write in grep.

Compiling is not covered by the timeout, and the ``regex`` module unfolds a counted repeat
into copies of what it repeats: ``(?:a{1000}){1000}`` is a million items, a second of
compiling, and ``(?:a{9999}){9999}`` takes all the memory there is. So a regular
expression is measured before it is compiled (:func:`unfolded_size`) and refused above
:data:`MAX_REGEX_SIZE`.

Globs are ``fnmatch`` patterns, refused above :data:`MAX_GLOB_CHARS` (``fnmatch.translate``
is quadratic in runs of ``[``) and above :data:`MAX_GLOBS` at once. Gitignore-style patterns
(folder walks: ``--include``, ``--exclude``, ``.gitignore`` files) are matched by pathspec on
``re``, where each ``*`` of a path segment is a ``[^/]*`` that backtracks against the others:
``*a*a*a*a*a*a*a*a*a*ab`` takes half a minute on a 40-character name. :func:`gitignore_problem`
refuses more than :data:`MAX_SEGMENT_STARS` stars in one segment (quadratic in a name of at
most 255 characters: instant) and :data:`MAX_PATTERN_STARS` in all.
"""

from __future__ import annotations

import bisect
import fnmatch
import re
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

import regex as regex_engine

from knowledge_agent.errors import QueryError

__all__ = [
    "MAX_GLOBS",
    "MAX_GLOB_CHARS",
    "MAX_PATTERN_CHARS",
    "MAX_PATTERN_STARS",
    "MAX_REGEX_SIZE",
    "MAX_SEGMENT_STARS",
    "REGEX_SECONDS",
    "TextPattern",
    "check_glob",
    "gitignore_problem",
    "glob_regex",
    "unfolded_size",
]

MAX_PATTERN_CHARS = 1000
"""Longest literal or regular expression a text search takes."""
MAX_REGEX_SIZE = 100_000
"""Most items a regular expression may unfold to when compiled (about a tenth of a second)."""
MAX_GLOB_CHARS = 1000
"""Longest glob a filter, a listing or a crawl takes."""
MAX_GLOBS = 100
"""Most globs one filter takes (they are compiled into one expression)."""
MAX_SEGMENT_STARS = 2
"""Most ``*`` wildcards a gitignore-style pattern may have in one path segment."""
MAX_PATTERN_STARS = 8
"""Most ``*`` wildcards (``**`` included) a gitignore-style pattern may have in all."""
REGEX_SECONDS = 2.0
"""Matching time one scan may spend, besides what it earns by the text it reads."""
# What each search earns on top of REGEX_SECONDS: the regex module's own cost of a call
# with a timeout (some microseconds) and about a microsecond per character, many times
# what a pattern that does not backtrack needs.
_SECONDS_PER_SEARCH = 20e-6
_SECONDS_PER_CHAR = 1e-6

Match = regex_engine.Match[str]
_T = TypeVar("_T")

# What compiling a pattern may raise besides regex.error: conflicting inline flags
# (ValueError), counts past the engine's limits (OverflowError), deep nesting
# (RecursionError, from the parser written in Python).
_COMPILE_ERRORS = (regex_engine.error, ValueError, OverflowError, RecursionError)


def check_glob(pattern: object, name: str, *, max_chars: int = MAX_GLOB_CHARS) -> str:
    """``pattern`` if it is a string of at most ``max_chars`` characters, else a
    ``QueryError`` naming ``name``."""
    if not isinstance(pattern, str):
        raise QueryError(f"{name} must be a string, got {type(pattern).__name__} {pattern!r:.80}")
    if len(pattern) > max_chars:
        raise QueryError(
            f"{name} is {len(pattern):,} characters long; at most {max_chars:,} are allowed"
        )
    return pattern


def glob_regex(globs: Sequence[str], name: str) -> re.Pattern[str]:
    """One compiled expression matching what any of ``globs`` matches (``fnmatch`` rules,
    case-sensitive, whole string)."""
    if len(globs) > MAX_GLOBS:
        raise QueryError(f"{name} holds {len(globs):,} globs; at most {MAX_GLOBS} are allowed")
    for glob in globs:
        check_glob(glob, name)
    # fnmatch's translation repeats no item a counted number of times: the size stays
    # linear in the globs', and the stars become atomic groups, so matching never backtracks.
    return re.compile("|".join(f"(?:{fnmatch.translate(glob)})" for glob in globs))


def gitignore_problem(pattern: str) -> str | None:
    """Why a gitignore-style pattern would take too long to match, or None.

    Too long, or more stars than the limits (a run of stars counts once; an escaped star
    and one inside ``[...]`` are no wildcards): see the module docstring.
    """
    if len(pattern) > MAX_GLOB_CHARS:
        return f"it is {len(pattern):,} characters long; at most {MAX_GLOB_CHARS:,} are allowed"
    total = 0
    for segment in pattern.split("/"):
        stars, index = 0, 0
        while index < len(segment):
            char = segment[index]
            if char == "\\":
                index += 2
                continue
            if char == "[":
                end = segment.find("]", index + 2)
                index = len(segment) if end < 0 else end + 1
                continue
            if char == "*":
                stars += 1
                while index < len(segment) and segment[index] == "*":
                    index += 1
                continue
            index += 1
        if stars > MAX_SEGMENT_STARS and segment.strip("*"):
            return (
                f"it has {stars} wildcards in one path segment ({segment!r:.60}); "
                f"at most {MAX_SEGMENT_STARS} match in bounded time"
            )
        total += stars
    if total > MAX_PATTERN_STARS:
        return f"it has {total} wildcards; at most {MAX_PATTERN_STARS} match in bounded time"
    return None


class TextPattern:
    """A literal or a regular expression to find in lines of text, with a budget of
    matching time.

    Make one per scan: every :meth:`search`, :meth:`finditer` and :meth:`candidate_lines`
    draws on the same ``seconds`` (plus what each earns by the length of its text); once
    they are spent, the call raises ``QueryError``, and so does every later one. ``name`` is
    the argument the pattern came from, for the messages (``keyword``, ``PATTERN``).
    """

    def __init__(
        self,
        pattern: object,
        *,
        regex: bool,
        case_sensitive: bool,
        seconds: float = REGEX_SECONDS,
        name: str = "pattern",
    ) -> None:
        if not isinstance(pattern, str) or not pattern:
            raise QueryError(f"{name} must be a non-empty string, got {pattern!r:.80}")
        if len(pattern) > MAX_PATTERN_CHARS:
            raise QueryError(
                f"{name} is {len(pattern):,} characters long; "
                f"at most {MAX_PATTERN_CHARS:,} are allowed"
            )
        self.pattern = pattern
        self.name = name
        self.is_regex = regex
        self._seconds = seconds
        self._left = seconds
        self._spent = False
        flags = regex_engine.VERSION0 | (0 if case_sensitive else regex_engine.IGNORECASE)
        if not regex:
            self._compiled = regex_engine.compile(regex_engine.escape(pattern), flags)
            self._whole: regex_engine.Pattern[str] | None = self._compiled
            return
        size = unfolded_size(pattern)
        if size > MAX_REGEX_SIZE:
            raise QueryError(
                f"{name}: the regular expression {pattern!r:.100} unfolds to over "
                f"{MAX_REGEX_SIZE:,} items (counted repeats such as {{1000}} multiply when "
                "nested); use smaller counts"
            )
        try:
            self._compiled = regex_engine.compile(pattern, flags)
            # Where ^ and $ also match at line breaks: a line's match is then a match in
            # the whole text, unless the pattern can see past a line (see _line_safe).
            multiline = flags | regex_engine.MULTILINE
            self._whole = regex_engine.compile(pattern, multiline) if _line_safe(pattern) else None
        except _COMPILE_ERRORS as exc:
            raise QueryError(f"invalid regular expression {pattern!r:.100} in {name}: {exc}") from (
                None
            )

    def search(self, text: str) -> Match | None:
        """The first match in ``text``, or None."""
        return self._timed(lambda timeout: self._compiled.search(text, timeout=timeout), text)

    def finditer(self, text: str) -> Iterator[Match]:
        """Every match in ``text``, left to right."""
        yield from self._timed(
            lambda timeout: list(self._compiled.finditer(text, timeout=timeout)), text
        )

    def candidate_lines(self, text: str) -> Sequence[int]:
        r"""The 0-based numbers of the lines of ``text`` (split at ``\n``) that may match, in
        order; :meth:`search` on each line tells.

        One search of the whole text finds them when no line can match without the whole
        text matching there too (a literal, or a regular expression without lookarounds,
        ``\A``, ``\Z``, atomic groups and the like); a match that spans lines makes each
        of them a candidate. Otherwise every line is one.
        """
        whole = self._whole
        if whole is None:
            return range(text.count("\n") + 1)
        lines: list[int] = []

        def scan(timeout: float) -> None:
            breaks = None  # where the lines end: looked up once there is a match
            for found in whole.finditer(text, timeout=timeout):
                if breaks is None:
                    breaks = [end.start() for end in _LINE_BREAK.finditer(text)]
                # The line of a position: how many line breaks come before it.
                first = bisect.bisect_left(breaks, found.start())
                last = bisect.bisect_left(breaks, max(found.start(), found.end() - 1))
                lines.extend(range(max(first, lines[-1] + 1 if lines else 0), last + 1))

        self._timed(scan, text)
        return lines

    def _timed(self, run: Callable[[float], _T], text: str) -> _T:
        if self._spent:
            raise self._overrun()
        self._left += _SECONDS_PER_SEARCH + _SECONDS_PER_CHAR * len(text)
        started = time.perf_counter()
        try:
            return run(self._left)
        except TimeoutError:
            self._spent = True
            raise self._overrun() from None
        finally:
            self._left -= time.perf_counter() - started

    def _overrun(self) -> QueryError:
        kind = "regular expression" if self.is_regex else "text"
        return QueryError(
            f"{self.name}: the {kind} {self.pattern!r:.100} took too long to match (over "
            f"{self._seconds:g} s); simplify it, e.g. avoid nested repeats like (a|aa)+"
        )


_LINE_BREAK = re.compile("\n")

# Escapes that match characters or test a word's edge: on a line and on the text around it
# they agree. \A, \Z, \G, \X ("\r\n" is one grapheme) and the rest may not.
_LINE_SAFE_ESCAPES = frozenset("bBdDsSwWmMtnrfvaxuUgN0123456789")
# Group openings that only group, name, refer back or set flags that keep lines apart.
_LINE_SAFE_GROUP = re.compile(r"\(\?(?::|\||P<|P=|<[^=!]|#|[imsx]+[:)])")


def _line_safe(pattern: str) -> bool:
    r"""Whether every line (the text between two line breaks) that ``pattern`` matches makes
    the whole text match too, with ``^`` and ``$`` matching at line breaks.

    True for what only consumes characters within the line and tests its edges (classes,
    repeats, groups, alternatives, backreferences, ``^``, ``$``, ``\b``); False for what
    can see past them or refuses to give back what it consumed: lookarounds, ``\A``,
    ``\Z``, ``\G``, ``\X``, atomic groups, possessive repeats, verbs such as
    ``(*SKIP)``, fuzzy matching, and verbose mode, whose comments are not read here.
    """
    if _VERBOSE.search(pattern):
        return False
    after_repeat = False
    at = 0
    while at < len(pattern):
        char = pattern[at]
        repeat = False
        if char == "\\":
            escaped = pattern[at + 1 : at + 2]
            if escaped.isalnum() and escaped not in _LINE_SAFE_ESCAPES:
                return False
            at += 2
        elif char == "[":
            end = _class_end(pattern, at)
            if end is None:
                return False
            at = end
        elif char == "(":
            if pattern.startswith("(?#", at):
                end = pattern.find(")", at)
                at = len(pattern) if end < 0 else end + 1
            elif pattern.startswith(("(?", "(*"), at):
                group = _LINE_SAFE_GROUP.match(pattern, at)
                if group is None:
                    return False
                at = group.end()
            else:
                at += 1
        elif char == "{":
            count = _COUNT.match(pattern, at)
            if count is not None and (count[1] or count[2]):
                repeat = True
                at = count.end()
            elif pattern[at + 1 : at + 2].isalpha():  # a fuzzy constraint such as {e<=1}
                return False
            else:
                at += 1
        elif char in "*+?":
            if char == "+" and after_repeat:  # a possessive repeat
                return False
            repeat = not (char == "?" and after_repeat)  # "?" after a repeat makes it lazy
            at += 1
        else:
            at += 1
        after_repeat = repeat
    return True


# -- the compiled size of a regular expression ---------------------------------------------

# A counted repeat: {m}, {m,}, {,n} or {m,n} (anything else in braces is literal text).
_COUNT = re.compile(r"\{(\d*),?(\d*)\}")
# An inline flag group that may turn on verbose mode, where whitespace and # comments
# change what the quantifiers apply to.
_VERBOSE = re.compile(r"\(\?[\^a-zA-Z-]*x")


def unfolded_size(pattern: str) -> int:
    """At least how many items the ``regex`` module unfolds ``pattern`` into when it
    compiles it (capped just above :data:`MAX_REGEX_SIZE`).

    Each character, escape, class or group is an item; a counted repeat of at least
    ``m`` copies it ``m`` times, and nested repeats multiply. Where the pattern's structure
    is not read with certainty (verbose mode, a POSIX class, an unclosed class), every
    counted repeat is taken to apply to the whole pattern.
    """
    if _VERBOSE.search(pattern):
        return _everything_repeated(pattern)
    cap = MAX_REGEX_SIZE + 1
    frames = [[0, 0]]  # per open group: [its size so far, the size of its last item]
    at = 0
    while at < len(pattern):
        char = pattern[at]
        count = _COUNT.match(pattern, at) if char == "{" else None
        if count is not None and (count[1] or count[2]):
            copies = max(int(count[1] or 0), 1)  # a range unfolds only its minimum
            frame = frames[-1]
            frame[0] = min(frame[0] + frame[1] * (copies - 1), cap)
            frame[1] = min(frame[1] * copies, cap)
            at = count.end()
            continue
        if pattern.startswith("(?#", at):  # a comment ends at the first ")", escaped or not
            end = pattern.find(")", at)
            at = len(pattern) if end < 0 else end + 1
            continue
        if char == "(":
            frames.append([0, 0])
            at += 1
            continue
        item = 1
        if char == ")" and len(frames) > 1:
            item = max(frames.pop()[0], 1)
            at += 1
        elif char == "[":
            end = _class_end(pattern, at)
            if end is None:
                return _everything_repeated(pattern)
            at = end
        else:
            at += 2 if char == "\\" else 1
        frame = frames[-1]
        frame[0] = min(frame[0] + item, cap)
        frame[1] = item
    return min(sum(frame[0] for frame in frames), cap)


def _class_end(pattern: str, start: int) -> int | None:
    """Where the character class opening at ``start`` ends (past its ``]``), or None when
    it holds a POSIX class or does not end (then the structure is uncertain)."""
    at = start + 1
    if pattern.startswith("^", at):
        at += 1
    if pattern.startswith("]", at):  # a "]" first in a class is literal
        at += 1
    while at < len(pattern):
        char = pattern[at]
        if char == "\\":
            at += 2
        elif char == "]":
            return at + 1
        elif pattern.startswith("[:", at):
            return None
        else:
            at += 1
    return None


def _everything_repeated(pattern: str) -> int:
    """The pattern's length times every counted repeat's minimum: a size no reading of
    its structure can exceed."""
    size = max(len(pattern), 1)
    for count in _COUNT.finditer(pattern):
        size = min(size * max(int(count[1] or 0), 1), MAX_REGEX_SIZE + 1)
    return size
