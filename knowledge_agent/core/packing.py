"""Packing search results into a token budget: adjacent chunks of a document merged into one
passage, the best passages first, until the budget is spent.

A result offers its matched chunks with their context neighbours; chunks next to each other
in the document (consecutive ``chunk_index``) become one passage whose text is exactly
``item.content[start_position:end_position]`` — the chunks' texts with their overlaps
taken once, and the text between two chunks (the blank lines the chunker leaves out) read
from the document. Passages are taken best first (their best matched chunk's score, then
the result's rank); one that does not fit is tried again as its matched chunks alone
(without the context around them), and left out if that does not fit either — a smaller one
further down may still fit. The first passage is cut to the budget rather than left out,
so a budget that holds its location line always gives something.

Tokens are :func:`~knowledge_agent.tokens.estimate_tokens`, the MCP tools' measure, counted
on what :meth:`PackedContext.text` gives: each passage under a ``[n] location · heading``
line.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from knowledge_agent.errors import KnowledgeAgentError, QueryError
from knowledge_agent.models import MatchedChunk, SearchResult
from knowledge_agent.models.result_view import chunk_heading, item_path, location
from knowledge_agent.tokens import estimate_tokens

__all__ = ["PackedContext", "PackedPassage", "pack_results"]

logger = logging.getLogger(__name__)

_SEPARATOR = "\n\n"


@dataclass
class PackedPassage:
    """Adjacent chunks of one document as one passage.

    ``text`` is ``content[start_position:end_position]`` of the document (``item_id``,
    ``path``); ``start_line``/``end_line`` are its lines (None where the chunks carry
    none), ``location`` where a reader opens it (``path:12-30``, ``path p.3``,
    ``url#section``), ``heading`` the section of its best matched passage. ``chunk_ids``
    are its chunks in document order, ``matched_chunk_ids`` those the search matched;
    ``score`` is the best of theirs. ``tokens`` is what its block in
    :meth:`PackedContext.text` costs; ``truncated`` says the text was cut to the budget (it
    then ends before the chunks do).
    """

    item_id: str
    path: str
    title: str
    kb: str
    location: str
    heading: str
    text: str
    start_position: int
    end_position: int
    start_line: int | None
    end_line: int | None
    chunk_ids: list[str]
    matched_chunk_ids: list[str]
    score: float
    tokens: int = 0
    truncated: bool = False

    def block(self, number: int) -> str:
        """The passage as :meth:`PackedContext.text` shows it, numbered ``[number]``."""
        where = self.location + (f" · {self.heading}" if self.heading else "")
        return f"[{number}] {where}\n{self.text}"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of every field."""
        return asdict(self)


@dataclass
class PackedContext:
    """The passages packed into ``budget`` tokens, best first; ``tokens`` is what they
    cost together (at most ``budget``), ``left_out`` how many passages did not fit."""

    budget: int
    passages: list[PackedPassage] = field(default_factory=list)
    tokens: int = 0
    left_out: int = 0

    def text(self) -> str:
        """The passages as one text to give a model: each under a ``[n] location ·
        heading`` line, separated by a blank line; its estimated tokens are at most
        ``budget``."""
        return _SEPARATOR.join(
            passage.block(number) for number, passage in enumerate(self.passages, start=1)
        )

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict: the budget, the tokens spent, the passages and how many were
        left out."""
        return {
            "budget": self.budget,
            "tokens": self.tokens,
            "left_out": self.left_out,
            "passages": [passage.to_dict() for passage in self.passages],
        }


@dataclass
class _Run:
    """Adjacent chunks of one result (document order), and which of them matched."""

    rank: int
    result: SearchResult
    chunks: list[MatchedChunk]
    matched: set[str]

    @property
    def score(self) -> float:
        scores = [c.score for c in self.chunks if c.chunk_id in self.matched]
        return max(scores) if scores else self.result.relevance_score

    def best(self) -> MatchedChunk:
        """The run's best matched chunk (its first chunk when none matched)."""
        matched = [c for c in self.chunks if c.chunk_id in self.matched]
        return max(matched, key=lambda chunk: chunk.score) if matched else self.chunks[0]

    def core(self) -> _Run:
        """The run from its first matched chunk to its last (no context around them)."""
        indexes = [i for i, c in enumerate(self.chunks) if c.chunk_id in self.matched]
        if not indexes:
            return self
        return replace(self, chunks=self.chunks[indexes[0] : indexes[-1] + 1])


def pack_results(results: Sequence[SearchResult], budget: int) -> PackedContext:
    """``results`` (best first) packed into ``budget`` tokens (see the module's notes).

    ``QueryError`` unless ``budget`` is an integer >= 1. Reading the text between two
    chunks may read a document (:class:`~knowledge_agent.models.ResultItem`); a document
    deleted or changed since the search gives its chunks as separate passages.
    """
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
        raise QueryError(f"budget must be an integer >= 1 (tokens), got {budget!r}")
    runs = [run for rank, result in enumerate(results) for run in _runs(rank, result)]
    runs.sort(key=lambda run: -run.score)  # stable: ties keep the results' order
    packed = PackedContext(budget)
    for run in runs:
        number = len(packed.passages) + 1
        room = budget - packed.tokens
        forms = [run] if run.core().chunks == run.chunks else [run, run.core()]
        passage = next(
            (p for p in (_passage(form, number) for form in forms) if p.tokens <= room), None
        )
        if passage is None and not packed.passages:
            passage = _cut(forms[-1], number, room)
        if passage is None:
            packed.left_out += 1
            continue
        packed.passages.append(passage)
        packed.tokens += passage.tokens
    return packed


def _runs(rank: int, result: SearchResult) -> list[_Run]:
    """A result's chunks (matched and context) in runs of consecutive chunk indexes, each
    with a matched chunk; the whole document for an item-level result."""
    if not result.matched_chunks:
        return [_Run(rank, result, [], set())]
    by_index = {chunk.chunk_index: chunk for chunk in result.context_chunks}
    by_index.update({chunk.chunk_index: chunk for chunk in result.matched_chunks})
    matched = {chunk.chunk_id for chunk in result.matched_chunks}
    runs: list[_Run] = []
    for index in sorted(by_index):
        if runs and runs[-1].chunks[-1].chunk_index == index - 1:
            runs[-1].chunks.append(by_index[index])
        else:
            runs.append(_Run(rank, result, [by_index[index]], matched))
    return [part for run in runs for part in _joinable(run)]


def _joinable(run: _Run) -> list[_Run]:
    """``run``, or its parts when the text between two of its chunks cannot be read (the
    document was deleted or changed since the search)."""
    parts = [replace(run, chunks=[run.chunks[0]])]
    for chunk in run.chunks[1:]:
        previous = parts[-1].chunks[-1]
        gap = (previous.end_position, chunk.start_position)
        if gap[1] > gap[0] and _between(run, *gap) is None:
            parts.append(replace(run, chunks=[chunk]))
        else:
            parts[-1].chunks.append(chunk)
    return [part for part in parts if part.matched & {c.chunk_id for c in part.chunks}]


def _between(run: _Run, start: int, end: int) -> str | None:
    """The document's text from ``start`` to ``end`` (between two chunks), or None when it
    cannot be read."""
    try:
        return run.result.item.content[start:end]
    except KnowledgeAgentError as exc:
        logger.info("packing without the text between two chunks: %s", exc)
        return None


def _passage(run: _Run, number: int, keep: int | None = None) -> PackedPassage:
    """The passage a run of chunks makes, its tokens counted as block ``number``; with
    ``keep``, its text cut to that many characters (``truncated``)."""
    item = run.result.item
    path = item_path(item)
    if not run.chunks:  # an item-level result: the document itself
        text = item.content[:keep]
        passage = PackedPassage(
            item.id, path, item.title, item.kb, path, item.title, text, 0, len(text),
            None, None, [], [], run.result.relevance_score, truncated=keep is not None,
        )  # fmt: skip
        return _counted(passage, number)
    first, last = run.chunks[0], run.chunks[-1]
    text, end = first.content, first.end_position
    for chunk in run.chunks[1:]:
        if chunk.start_position > end:  # readable: _joinable split the run where not
            text += _between(run, end, chunk.start_position) or ""
            end = chunk.start_position
        if chunk.end_position > end:
            text += chunk.content[end - chunk.start_position :]
            end = chunk.end_position
    start_line, end_line = first.metadata.get("start_line"), last.metadata.get("end_line")
    if keep is not None:
        text = text[:keep]
        end = first.start_position + len(text)
        if isinstance(start_line, int):
            end_line = start_line + text.count("\n")
    where = {
        "start_line": start_line,
        "end_line": end_line,
        "page": first.metadata.get("page"),
        "page_end": last.metadata.get("page_end", last.metadata.get("page")),
        "url": first.metadata.get("url"),
    }
    passage = PackedPassage(
        item_id=item.id,
        path=path,
        title=item.title,
        kb=item.kb,
        location=location(path, {k: v for k, v in where.items() if v is not None}),
        heading=chunk_heading(run.best()),
        text=text,
        start_position=first.start_position,
        end_position=end,
        start_line=start_line if isinstance(start_line, int) else None,
        end_line=end_line if isinstance(end_line, int) else None,
        chunk_ids=[chunk.chunk_id for chunk in run.chunks],
        matched_chunk_ids=[c.chunk_id for c in run.chunks if c.chunk_id in run.matched],
        score=run.score,
        truncated=keep is not None,
    )
    return _counted(passage, number)


def _counted(passage: PackedPassage, number: int) -> PackedPassage:
    passage.tokens = estimate_tokens(passage.block(number) + _SEPARATOR)
    return passage


def _cut(run: _Run, number: int, room: int) -> PackedPassage | None:
    """The passage of ``run`` with its text cut at the end to fit ``room`` tokens (at a
    line or word break in its second half when there is one), or None when not even its
    location line fits."""
    whole = _passage(run, number)
    low, high = 0, len(whole.text)  # the longest prefix that fits: tokens grow with it
    while low < high:
        middle = (low + high + 1) // 2
        if _passage(run, number, middle).tokens <= room:
            low = middle
        else:
            high = middle - 1
    if low == 0:
        return None
    for mark in ("\n", " "):
        cut = whole.text.rfind(mark, 0, low)
        if cut > low // 2:
            low = cut
            break
    return _passage(run, number, low)
