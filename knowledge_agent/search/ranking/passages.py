"""Passage evidence: how well the best sentence or line of a chunk matches the query.

BM25 scores a chunk as a bag of words, so a chunk that mentions every query word somewhere
can outrank the one holding the query's words together in one line (a tldr example, the
sentence that answers a question). The engine re-scores its best candidates with two
signals of their best *unit* (a line, or a sentence of a longer paragraph):

* **coverage**: the idf-weighted share of the query's terms the unit contains;
* **proximity**: the idf-weighted share of the query's consecutive term pairs that occur in
  the unit in the same order, at most :data:`PAIR_WINDOW` positions apart.

Both are in [0, 1] and mean the same for any query, so with the best chunk's BM25 relative to
the best BM25 the query could reach they also make a result's :func:`confidence`.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from knowledge_agent.analysis import CJK_CHARACTERS, TextAnalyzer
from knowledge_agent.search.ranking.analysed import AnalysedText

__all__ = [
    "PAIR_WINDOW",
    "PassageEvidence",
    "confidence",
    "passage_evidence",
    "units",
    "unseen_share",
]

PAIR_WINDOW = 2
# A unit ends at a line break, or after a sentence end followed by a space.
_UNIT_RE = re.compile(r"[^\n]+?(?:[.!?。！？；;](?=\s)|[。！？]|$)", re.MULTILINE)
_UNIT_MIN_CHARS = 3
_CJK_RE = re.compile(f"[{CJK_CHARACTERS}]")
# Share of the keyword evidence in a confidence; the passage evidence has the rest. Measured
# on queries against their own corpus and against another (benchmarks/confidence.py).
_KEYWORD_SHARE = 0.7


@dataclass(frozen=True)
class PassageEvidence:
    """The best unit's coverage and proximity, and that unit's span in the chunk."""

    coverage: float
    proximity: float
    start: int
    end: int

    def score(self, coverage_weight: float, proximity_weight: float) -> float:
        return coverage_weight * self.coverage + proximity_weight * self.proximity


def confidence(
    keyword_share: float | None, evidence: PassageEvidence | None, unseen_share: float = 0.0
) -> float:
    """How surely a result answers its query, in [0, 1], comparable across queries.

    ``keyword_share`` is the BM25 of the chunk (or item) over the best BM25 the query could
    reach, None when the keyword engine did not run; ``evidence`` is its best unit's, None
    when there is none (an item-level result). ``unseen_share`` is the idf-weighted share
    of the query's terms the whole base has never seen: a question about something the base
    does not know is not answered by a passage that shares its other words, so the
    confidence shrinks by it (measured on real documentation, benchmarks/realdocs.py).
    """
    known = 1.0 - min(max(unseen_share, 0.0), 1.0)
    keyword = None if keyword_share is None else min(max(keyword_share, 0.0), 1.0)
    if evidence is None:
        return (keyword or 0.0) * known
    passage = (evidence.coverage + evidence.proximity) / 2
    if keyword is None:
        return passage * known
    return (_KEYWORD_SHARE * keyword + (1 - _KEYWORD_SHARE) * passage) * known


def unseen_share(terms: Sequence[str], idf: Mapping[str, float], unseen: set[str]) -> float:
    """The idf-weighted share of ``terms`` that are ``unseen`` (each occurrence counted).

    A CJK bigram never counts as unseen: bigrams are cut across word boundaries, so most of
    a Chinese question's never occur even in the passage that answers it."""
    total = sum(max(idf.get(term, 0.0), 0.0) for term in terms)
    if total <= 0 or not unseen:
        return 0.0
    words = [term for term in terms if term in unseen and not _CJK_RE.search(term)]
    return sum(max(idf.get(term, 0.0), 0.0) for term in words) / total


def units(text: str) -> list[tuple[int, int]]:
    """(start, end) of each line or sentence of ``text`` with some text in it."""
    return [
        (m.start(), m.end())
        for m in _UNIT_RE.finditer(text)
        if len(m.group().strip()) >= _UNIT_MIN_CHARS
    ]


def passage_evidence(
    terms: Sequence[str],
    text: str,
    idf: Mapping[str, float],
    analyzer: TextAnalyzer,
    analysed: AnalysedText | None = None,
) -> PassageEvidence:
    """The evidence of the unit of ``text`` that scores best for the analysed query ``terms``
    (``analysed``: ``text`` analysed already, whose units are then read off it)."""
    wanted = {term: max(idf.get(term, 0.0), 0.0) for term in terms}
    total = sum(wanted.values())
    pairs = [(a, b) for a, b in itertools.pairwise(terms) if a != b and not _overlap(a, b)]
    pair_weights = [min(wanted[a], wanted[b]) for a, b in pairs]
    pair_total = sum(pair_weights)
    best = PassageEvidence(0.0, 0.0, 0, 0)
    if total <= 0:
        return best
    best_score = -1.0
    for start, end in units(text):
        positions: dict[str, list[int]] = {}
        unit = (
            analyzer.terms(text[start:end]) if analysed is None else analysed.unit_terms(start, end)
        )
        for position, term in enumerate(unit):
            if term in wanted:
                positions.setdefault(term, []).append(position)
        if not positions:
            continue
        coverage = sum(wanted[term] for term in positions) / total
        proximity = 0.0
        if pair_total > 0:
            near = sum(
                weight
                for (a, b), weight in zip(pairs, pair_weights, strict=True)
                if _follows(positions.get(a), positions.get(b))
            )
            proximity = near / pair_total
        if coverage + proximity > best_score:
            best = PassageEvidence(coverage, proximity, start, end)
            best_score = coverage + proximity
    return best


def _overlap(first: str, second: str) -> bool:
    """Whether two terms are overlapping CJK bigrams of one run (如何, 何重): near each other
    they only repeat what coverage says, and they made question words (什么, 哪些) count as
    phrases (CMRC 2018 R@1 0.971 with them, 0.980 without)."""
    return (
        len(first) == len(second) == 2
        and first[1] == second[0]
        and not first.isascii()
        and _CJK_RE.match(first) is not None
    )


def _follows(first: list[int] | None, second: list[int] | None) -> bool:
    """Whether some position of ``second`` comes 1..PAIR_WINDOW after one of ``first``."""
    if not first or not second:
        return False
    later = set(second)
    return any(p + gap in later for p in first for gap in range(1, PAIR_WINDOW + 1))
