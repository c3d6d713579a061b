"""The reference systems measured next to knowledge_agent: bm25s (whole documents and
paragraphs grouped per document) and SQLite FTS5."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Sequence

import bm25s
import numpy as np

from benchmarks.datasets import Document
from benchmarks.reference_tokenizer import ReferenceTokenizer, bigram_cjk_text
from benchmarks.systems import Hit

_PARAGRAPH_BREAK_RE = re.compile(r"\n[ \t]*\n")
_FTS_TERM_RE = re.compile(r"[^\W_]+")  # unicode61 splits on everything but letters and digits


def split_paragraphs(text: str) -> list[str]:
    """Paragraphs = blocks separated by a blank line (empty blocks dropped)."""
    return [p.strip() for p in _PARAGRAPH_BREAK_RE.split(text) if p.strip()]


def _top_k(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k best positive scores, best first (ties by index)."""
    k = min(k, len(scores))
    if k <= 0:
        return np.empty(0, dtype=np.int64)
    candidates = np.argpartition(-scores, k - 1)[:k]
    candidates = candidates[scores[candidates] > 0]
    return candidates[np.lexsort((candidates, -scores[candidates]))]


class _Bm25:
    """Lucene BM25 (k1 = 1.2, b = 0.75) from bm25s over a list of texts."""

    def __init__(self, tokenizer: ReferenceTokenizer) -> None:
        self._tokenize = tokenizer
        self._retriever = bm25s.BM25(method="lucene", k1=1.2, b=0.75)

    def index(self, texts: list[str]) -> None:
        self._retriever.index([self._tokenize(t) for t in texts], show_progress=False)

    def scores(self, query: str) -> np.ndarray | None:
        """Score of every indexed text, or None when no query term is in the vocabulary."""
        vocab = self._retriever.vocab_dict
        ids = [vocab[t] for t in self._tokenize(query) if t in vocab]
        if not ids:
            return None
        return self._retriever.get_scores_from_ids(ids)


class Bm25DocSystem:
    """``bm25s-doc``: BM25 over whole documents (title + text)."""

    def __init__(self, name: str = "bm25s-doc") -> None:
        self.name = name
        self._bm25 = _Bm25(ReferenceTokenizer())
        self._doc_ids: list[str] = []

    def index(self, docs: Sequence[Document]) -> None:
        self._doc_ids = [d.doc_id for d in docs]
        self._bm25.index([d.full_text() for d in docs])

    def search(self, query: str, k: int) -> list[Hit]:
        scores = self._bm25.scores(query)
        if scores is None:
            return []
        return [Hit(self._doc_ids[i], float(scores[i])) for i in _top_k(scores, k)]

    def close(self) -> None:
        pass


class Bm25ParagraphSystem:
    """``bm25s-para``: BM25 over paragraphs; a document scores as its best paragraph."""

    def __init__(self, name: str = "bm25s-para") -> None:
        self.name = name
        self._bm25 = _Bm25(ReferenceTokenizer())
        self._doc_ids: list[str] = []
        self._paragraphs: list[str] = []
        self._starts = np.empty(0, dtype=np.int64)  # first paragraph of each document

    def index(self, docs: Sequence[Document]) -> None:
        starts = []
        self._doc_ids, self._paragraphs = [], []
        for doc in docs:
            paragraphs = split_paragraphs(doc.full_text()) or [""]
            self._doc_ids.append(doc.doc_id)
            starts.append(len(self._paragraphs))
            self._paragraphs.extend(paragraphs)
        self._starts = np.asarray(starts, dtype=np.int64)
        self._bm25.index(self._paragraphs)

    def search(self, query: str, k: int) -> list[Hit]:
        scores = self._bm25.scores(query)
        if scores is None:
            return []
        doc_scores = np.maximum.reduceat(scores, self._starts)
        ends = np.append(self._starts[1:], len(scores))
        hits = []
        for d in _top_k(doc_scores, k):
            start = self._starts[d]
            best = start + int(np.argmax(scores[start : ends[d]]))
            hits.append(Hit(self._doc_ids[d], float(doc_scores[d]), self._paragraphs[best]))
        return hits

    def close(self) -> None:
        pass


class Fts5System:
    """``fts5``: SQLite FTS5 (porter unicode61) over whole documents, query = OR of terms,
    ranked by bm25().

    unicode61 cannot segment Chinese (a run of Han characters is one token), so CJK runs are
    rewritten as space-separated character bigrams both in the indexed text and in the query:
    the same segmentation the bm25s reference uses, so the comparison is fair.
    """

    def __init__(self, name: str = "fts5") -> None:
        self.name = name
        self._db = sqlite3.connect(":memory:")
        self._db.execute(
            "CREATE VIRTUAL TABLE docs USING fts5(doc_id UNINDEXED, body,"
            " tokenize='porter unicode61')"
        )

    def index(self, docs: Sequence[Document]) -> None:
        with self._db:
            self._db.executemany(
                "INSERT INTO docs (doc_id, body) VALUES (?, ?)",
                ((d.doc_id, bigram_cjk_text(d.full_text())) for d in docs),
            )

    @staticmethod
    def match_expression(query: str) -> str:
        """OR of the query's terms, each double-quoted so no character is FTS5 syntax.

        A repeated term is kept repeated: bm25() then counts it twice, as bm25s does."""
        terms = _FTS_TERM_RE.findall(bigram_cjk_text(query).lower())
        return " OR ".join('"' + term.replace('"', '""') + '"' for term in terms)

    def search(self, query: str, k: int) -> list[Hit]:
        expression = self.match_expression(query)
        if not expression:
            return []
        rows = self._db.execute(
            "SELECT doc_id, bm25(docs) AS rank FROM docs WHERE docs MATCH ? ORDER BY rank LIMIT ?",
            (expression, k),
        )
        return [Hit(doc_id, -rank) for doc_id, rank in rows]

    def close(self) -> None:
        self._db.close()
