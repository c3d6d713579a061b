"""The ``lines`` and ``tokens`` chunking strategies: fixed windows over counted units.

``lines`` counts non-blank lines (a line is text between ``\\n``; one holding only
whitespace is not counted): a window holds ``size`` of them and the next one starts
``size - overlap`` lines later, so neighbours share ``overlap`` lines.

``tokens`` counts tokens with :data:`TOKEN`, a regular expression and no vocabulary: a run
of word characters (letters, digits, ``_``) is one token, and so is each Han, Kana or
Hangul character and each other character that is neither a word character nor
whitespace (``(``, ``.``, ``=``, …). That is close to what the BPE tokenizers of embedding
and chat models count — an English word is one to two of their tokens, a CJK character
about one, code punctuation one each — while needing no download, giving the same count
on every machine and every version, and marking exact spans, so each window is a slice of
the text. Prose windows hold ``size`` tokens and start ``size - overlap`` tokens apart.
Code windows end at line ends: a window holds the whole lines that fit in ``size``
tokens and the next one repeats the last lines that fit in ``overlap``; a single line
longer than ``size`` is cut between tokens.

Every window is a trimmed span ``(start, end)`` of the text: ``text[start:end]`` is the
chunk. Counting a span (:meth:`Units.count`) gives the same number as counting the
span's own text, so a window never holds more than ``size`` units.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass

__all__ = ["CJK_CHARACTERS", "TOKEN", "Units", "count_lines", "count_tokens", "line_windows"]

# Han, Kana and Hangul: analysis.CJK_CHARACTERS, not imported from there because the
# analysis module loads Whoosh, which chunking (imported by every command) must not.
CJK_CHARACTERS = (
    "\u3005-\u3007\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U000323af"
    "\u3041-\u309f\u30a1-\u30fa\u30fc-\u30ff\u31f0-\u31ff\uff66-\uff9f"
    "\u1100-\u11ff\u3131-\u318e\ua960-\ua97f\uac00-\ud7a3\ud7b0-\ud7ff\uffa0-\uffdc"
)
TOKEN = re.compile(f"[{CJK_CHARACTERS}]|[^\\W{CJK_CHARACTERS}]+|[^\\w\\s]")
"""One token of the ``tokens`` strategy (see the module docstring)."""


def count_tokens(text: str) -> int:
    """How many tokens of the ``tokens`` strategy ``text`` holds."""
    return sum(1 for _ in TOKEN.finditer(text))


def count_lines(text: str) -> int:
    """How many non-blank lines ``text`` holds (lines split at ``\\n``)."""
    return sum(1 for line in text.split("\n") if line.strip())


@dataclass(frozen=True)
class Units:
    """The units (tokens or non-blank lines) of one text, as sorted, disjoint spans."""

    starts: list[int]
    ends: list[int]

    @classmethod
    def of(cls, text: str, kind: str) -> Units:
        """The ``"tokens"`` or ``"lines"`` of ``text`` (a line's span is trimmed)."""
        starts: list[int] = []
        ends: list[int] = []
        if kind == "tokens":
            for match in TOKEN.finditer(text):
                starts.append(match.start())
                ends.append(match.end())
        else:
            position = 0
            for line in text.split("\n"):
                stripped = line.strip()
                if stripped:
                    first = position + len(line) - len(line.lstrip())
                    starts.append(first)
                    ends.append(first + len(stripped))
                position += len(line) + 1
        return cls(starts, ends)

    def count(self, start: int, end: int) -> int:
        """How many units overlap ``[start, end)``: the count of ``text[start:end]`` itself
        when the span starts and ends on non-blank characters."""
        if start >= end:
            return 0
        return max(0, bisect.bisect_left(self.starts, end) - bisect.bisect_right(self.ends, start))

    def within(self, start: int, end: int) -> list[tuple[int, int]]:
        """The units overlapping ``[start, end)``, clipped to it."""
        first = bisect.bisect_right(self.ends, start)
        last = bisect.bisect_left(self.starts, end)
        return [(max(self.starts[i], start), min(self.ends[i], end)) for i in range(first, last)]

    def windows(self, start: int, end: int, size: int, overlap: int) -> list[tuple[int, int]]:
        """``[start, end)`` cut into windows of ``size`` units starting ``size - overlap``
        units apart; the last window ends with the last unit."""
        units = self.within(start, end)
        step = size - overlap
        spans: list[tuple[int, int]] = []
        for first in range(0, len(units), step):
            last = min(first + size, len(units))
            spans.append((units[first][0], units[last - 1][1]))
            if last == len(units):
                break
        return spans


def line_windows(
    text: str, tokens: Units, start: int, end: int, size: int, overlap: int
) -> list[tuple[int, int]]:
    """``[start, end)`` cut at line ends into windows of at most ``size`` tokens; each
    window after the first repeats the trailing lines of the one before that hold at most
    ``overlap`` tokens. A line longer than ``size`` tokens is cut into token windows."""
    pieces: list[tuple[int, int, int]] = []  # (start, end, tokens) of lines or line parts
    for line_start, line_end in Units.of(text[start:end], "lines").within(0, end - start):
        line_start += start
        line_end += start
        count = tokens.count(line_start, line_end)
        if count <= size:
            pieces.append((line_start, line_end, count))
            continue
        for part_start, part_end in tokens.windows(line_start, line_end, size, overlap):
            pieces.append((part_start, part_end, tokens.count(part_start, part_end)))
    spans: list[tuple[int, int]] = []
    first = 0
    while first < len(pieces):
        last, total = first, 0
        while last < len(pieces) and (last == first or total + pieces[last][2] <= size):
            total += pieces[last][2]
            last += 1
        spans.append((pieces[first][0], pieces[last - 1][1]))
        if last == len(pieces):
            break
        following, shared = last, 0
        while following - 1 > first and shared + pieces[following - 1][2] <= overlap:
            following -= 1
            shared += pieces[following][2]
        first = following
    return spans
