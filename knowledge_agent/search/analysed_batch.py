"""A batch of items and chunks analysed once, for both engines and both levels.

Every text part — an item's title, a chunk's heading path, its code symbol, its body — is
analysed once per batch with :meth:`TextAnalyzer.terms`, and repeated titles, headings and
symbols once in all. Analysing ``"a\\nb"`` gives ``terms(a) + terms(b)`` (no token crosses a
line break), so the text an engine indexes is a sequence of these parts: the keyword chunk
document (:func:`~knowledge_agent.search.documents.chunk_search_text`), the TF-IDF chunk row
and the item-level document are all built from the same term ids.

An item's own text is not analysed again: its item-level terms are its title's, then its
chunks' bodies in order, a window's overlap with the chunk before it counted once. The overlap
is cut at the first whitespace past it (a token never spans whitespace, so the two pieces
analyse to exactly the body's terms). An item without chunks has its content analysed.

Terms are ids into :attr:`AnalysedBatch.vocab`; every analysed part is a range of
:attr:`AnalysedBatch.pool`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from knowledge_agent.analysis import TextAnalyzer
from knowledge_agent.models.knowledge_chunk import KnowledgeChunk
from knowledge_agent.models.knowledge_item import KnowledgeItem
from knowledge_agent.search.term_hashing import feature_columns

__all__ = ["AnalysedBatch", "Pair", "gather", "grouped", "latest_pairs"]

Pair = tuple[KnowledgeItem, Sequence[KnowledgeChunk]]

_WHITESPACE = re.compile(r"\s")


def latest_pairs(upserts: Iterable[Pair]) -> list[tuple[KnowledgeItem, list[KnowledgeChunk]]]:
    """One pair per item id: its last version, in the position of that last version."""
    latest: dict[str, tuple[KnowledgeItem, list[KnowledgeChunk]]] = {}
    for item, chunks in upserts:
        latest.pop(item.id, None)
        latest[item.id] = (item, list(chunks))
    return list(latest.values())


def grouped(
    pairs: Iterable[Pair | AnalysedBatch], size: int, *, row_per_item: bool = False
) -> Iterator[list[Pair] | AnalysedBatch]:
    """``pairs`` pulled lazily in groups of up to ``size`` chunks or items (``row_per_item``:
    chunks plus items); an analysed batch among them is a group of its own."""
    group: list[Pair] = []
    chunks = 0
    for element in pairs:
        if isinstance(element, AnalysedBatch):
            if group:
                yield group
                group, chunks = [], 0
            yield element
            continue
        item, item_chunks = element
        group.append((item, list(item_chunks)))
        chunks += len(group[-1][1])
        if chunks + row_per_item * len(group) >= size or len(group) >= size:
            yield group
            group, chunks = [], 0
    if group:
        yield group


def gather(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The positions ``starts[i] .. starts[i] + lengths[i]`` of every range, back to back."""
    lengths = lengths.astype(np.int64, copy=False)
    total = int(lengths.sum())
    if total == 0:
        return np.empty(0, np.int64)
    before = np.cumsum(lengths) - lengths
    return np.arange(total, dtype=np.int64) + np.repeat(starts - before, lengths)


def _symbol_counts(chunk: KnowledgeChunk) -> str:
    """The chunk's code symbol if it weighs in its keyword document, else ""."""
    symbol = chunk.metadata.get("symbol")
    if isinstance(symbol, str) and chunk.metadata.get("symbol_type") != "module":
        return symbol
    return ""


class _Builder:
    """Collects terms part by part; a part is a (start, end) range of the pool."""

    def __init__(self, analyzer: TextAnalyzer) -> None:
        self.terms = analyzer  # callable: terms()
        self.pool: list[str] = []
        self.cache: dict[str, tuple[int, int]] = {}

    def part(self, text: str) -> tuple[int, int]:
        start = len(self.pool)
        if text:
            self.pool += self.terms(text)
        return start, len(self.pool)

    def cached(self, text: str) -> tuple[int, int]:
        found = self.cache.get(text)
        if found is None:
            found = self.cache[text] = self.part(text)
        return found


@dataclass(eq=False)
class AnalysedBatch:
    """Every text part of a batch of (item, chunks) pairs, analysed once.

    Ranges are ``(n, 2)`` int64 arrays of pool positions. Per item: ``title`` and ``text`` (the
    content, analysed only for an item without chunks); per chunk (all items' chunks in
    order, ``chunk_start[i]:chunk_start[i + 1]`` for item ``i``): ``heading``, ``symbol``
    (empty unless it counts, see ``chunk_search_text``) and ``body``, with ``tail`` the first
    body position that continues the item (past the overlap with the chunk before).
    """

    analyzer: TextAnalyzer
    pairs: list[tuple[KnowledgeItem, list[KnowledgeChunk]]]
    vocab: list[str]
    pool: np.ndarray  # int32 term ids
    title: np.ndarray
    text: np.ndarray
    chunk_start: np.ndarray  # int64, n_items + 1
    heading: np.ndarray
    symbol: np.ndarray
    body: np.ndarray
    tail: np.ndarray  # int64 per chunk
    title_in_heading: np.ndarray  # bool per chunk: the heading path starts with the title
    _columns: dict[int, np.ndarray] = field(default_factory=dict, repr=False)
    _bytes: tuple[list[bytes], np.ndarray] | None = field(default=None, repr=False)

    @classmethod
    def build(cls, analyzer: TextAnalyzer, upserts: Iterable[Pair]) -> AnalysedBatch:
        """Analyse the last version of every upserted item (see :func:`latest_pairs`)."""
        pairs = latest_pairs(upserts)
        b = _Builder(analyzer)
        title, text, chunk_start = [], [], [0]
        heading, symbol, body, tail, title_in_heading = [], [], [], [], []
        for item, chunks in pairs:
            item_title = item.title or ""
            title.append(b.cached(item_title))
            text.append(b.part("") if chunks else b.part(item.content or ""))
            covered = -1  # the end of the item's text the chunks so far analysed
            for chunk in chunks:
                heading.append(b.cached(chunk.heading or ""))
                symbol.append(b.cached(_symbol_counts(chunk)))
                title_in_heading.append(
                    not item_title or (chunk.heading or "").startswith(item_title)
                )
                content = chunk.content or ""
                start, end = chunk.start_position, chunk.end_position
                exact = end - start == len(content)  # positions that can be trusted
                if exact and start < covered:
                    match = _WHITESPACE.search(content, covered - start)
                    cut = match.start() if match else len(content)
                    first = b.part(content[:cut])
                    rest = b.part(content[cut:])
                    body.append((first[0], rest[1]))
                    tail.append(rest[0])
                else:
                    span = b.part(content)
                    body.append(span)
                    tail.append(span[0])
                if exact:
                    covered = max(covered, end)
            chunk_start.append(len(body))
        vocab = list(dict.fromkeys(b.pool))
        index = dict(zip(vocab, range(len(vocab)), strict=True))
        pool = np.fromiter(map(index.__getitem__, b.pool), np.int32, len(b.pool))

        def ranges(values: list[tuple[int, int]]) -> np.ndarray:
            return np.array(values, np.int64).reshape(-1, 2)

        return cls(
            analyzer=analyzer,
            pairs=pairs,
            vocab=vocab,
            pool=pool,
            title=ranges(title),
            text=ranges(text),
            chunk_start=np.array(chunk_start, np.int64),
            heading=ranges(heading),
            symbol=ranges(symbol),
            body=ranges(body),
            tail=np.array(tail, np.int64),
            title_in_heading=np.array(title_in_heading, bool),
        )

    def matches(self, analyzer: TextAnalyzer) -> bool:
        """Whether ``analyzer`` would give these terms (the same configuration)."""
        return self.analyzer is analyzer or self.analyzer.config == analyzer.config

    @property
    def n_items(self) -> int:
        return len(self.pairs)

    @property
    def n_chunks(self) -> int:
        return int(self.body.shape[0])

    def feature_columns(self, n_features: int) -> np.ndarray:
        """The hashed TF-IDF column of every vocabulary term (computed once per size)."""
        columns = self._columns.get(n_features)
        if columns is None:
            columns = self._columns[n_features] = feature_columns(self.vocab, n_features)
        return columns

    def vocab_bytes(self) -> tuple[list[bytes], np.ndarray]:
        """Every vocabulary term as UTF-8, and its rank among them in byte order (the
        order of a Whoosh term table)."""
        if self._bytes is None:
            encoded = [term.encode("utf-8") for term in self.vocab]
            rank = np.empty(len(encoded), np.int64)
            rank[sorted(range(len(encoded)), key=encoded.__getitem__)] = np.arange(len(encoded))
            self._bytes = (encoded, rank)
        return self._bytes

    def chunk_items(self) -> np.ndarray:
        """The item position of every chunk."""
        return np.repeat(np.arange(self.n_items), np.diff(self.chunk_start))

    def rows(self, parts: Sequence[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
        """(term ids, row of each) of rows made of parts, each part a (starts, ends) pair of
        per-row arrays; a row is its parts' terms in order."""
        starts = np.stack([start for start, _ in parts], axis=1).ravel()
        lengths = np.stack([end - start for start, end in parts], axis=1).ravel()
        lengths = np.maximum(lengths, 0)
        n_rows = parts[0][0].size if parts else 0
        row = np.repeat(np.repeat(np.arange(n_rows), len(parts)), lengths)
        return self.pool[gather(starts, lengths)], row

    def item_rows(self, items: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(term ids, row of each) of the item-level text — title, then the chunks' bodies
        without overlaps (or the content of an item without chunks) — of ``items``."""
        first, last = self.chunk_start[items], self.chunk_start[items + 1]
        n_chunks = last - first
        chunk = gather(first, n_chunks)
        chunk_row = np.repeat(np.arange(items.size), n_chunks)
        # Per row: title, own text, then its chunks' tails: ordered by (row, slot).
        starts = np.concatenate([self.title[items, 0], self.text[items, 0], self.tail[chunk]])
        ends = np.concatenate([self.title[items, 1], self.text[items, 1], self.body[chunk, 1]])
        row = np.concatenate([np.arange(items.size), np.arange(items.size), chunk_row])
        slot = np.concatenate(
            [np.zeros(items.size, np.int64), np.ones(items.size, np.int64), 2 + chunk]
        )
        order = np.lexsort((slot, row))
        lengths = (ends - starts)[order]
        ids = self.pool[gather(starts[order], lengths)]
        return ids, np.repeat(row[order], lengths)
