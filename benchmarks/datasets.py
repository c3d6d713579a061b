"""Loaders for the evaluation sets in ``../shared/datasets`` (BEIR-like layout, see its README).

Everything is read in place: nothing is copied into the project, and the tldr pages are read
straight from their tar.gz archive.
"""

from __future__ import annotations

import csv
import json
import os
import random
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

DATASET_NAMES = ("cranfield", "squad-long", "cmrc2018", "tldr")
DATASETS_ENV = "KNOWLEDGE_AGENT_DATASETS"


@dataclass(frozen=True)
class Document:
    doc_id: str
    title: str
    text: str
    # Whether ``text`` already carries the title (tldr pages start with their ``# `` heading).
    title_in_text: bool = False

    def full_text(self) -> str:
        """Title and text as one string: what the reference systems index."""
        if not self.title or self.title_in_text:
            return self.text
        return f"{self.title}\n\n{self.text}"


@dataclass(frozen=True)
class Query:
    query_id: str
    text: str
    answers: tuple[str, ...] = ()
    lang: str | None = None


@dataclass(frozen=True)
class Dataset:
    name: str
    documents: list[Document]
    queries: list[Query]
    # query id → {doc id → graded relevance}; only entries with a score > 0 are kept.
    qrels: dict[str, dict[str, int]] = field(default_factory=dict)

    def sample_queries(self, limit: int | None, seed: int = 0) -> Dataset:
        """A deterministic sample of ``limit`` judged queries (original order kept)."""
        judged = [q for q in self.queries if self.qrels.get(q.query_id)]
        if limit is not None and limit < len(judged):
            picked = sorted(random.Random(seed).sample(range(len(judged)), limit))
            judged = [judged[i] for i in picked]
        return replace(self, queries=judged)


def default_datasets_dir() -> Path:
    """``$KNOWLEDGE_AGENT_DATASETS``, else ``shared/datasets`` beside the project root."""
    env = os.environ.get(DATASETS_ENV)
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[1].parent / "shared" / "datasets"


def _read_jsonl(path: Path) -> list[dict]:
    with path.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def _read_qrels(path: Path) -> dict[str, dict[str, int]]:
    qrels: dict[str, dict[str, int]] = {}
    with path.open(encoding="utf-8", newline="") as handle:
        reader = csv.reader(handle, delimiter="\t")
        next(reader, None)  # header
        for row in reader:
            if len(row) < 3:
                continue
            query_id, doc_id, score = row[0], row[1], int(float(row[2]))
            if score > 0:
                qrels.setdefault(query_id, {})[doc_id] = score
    return qrels


def _read_queries(path: Path) -> list[Query]:
    return [
        Query(
            query_id=str(row["_id"]),
            text=row["text"],
            answers=tuple(row.get("answers") or ()),
            lang=row.get("lang"),
        )
        for row in _read_jsonl(path)
    ]


def _read_corpus(path: Path) -> list[Document]:
    return [
        Document(doc_id=str(row["_id"]), title=row.get("title") or "", text=row.get("text") or "")
        for row in _read_jsonl(path)
    ]


def markdown_title(text: str) -> str:
    """The first ``# `` heading of a markdown page, or ''."""
    for line in text.splitlines():
        if line.startswith("# "):
            return line[2:].strip()
    return ""


def tldr_pages(path: Path) -> Iterator[tuple[str, bytes]]:
    """Every markdown page of the tldr archive: its path inside the archive (without the
    leading ``tldr/``) and its bytes."""
    with tarfile.open(path, mode="r:gz") as archive:
        for member in archive:
            if not member.isfile() or not member.name.endswith(".md"):
                continue
            handle = archive.extractfile(member)
            if handle is not None:
                yield member.name.removeprefix("tldr/"), handle.read()


def _read_tldr_archive(path: Path) -> list[Document]:
    documents = []
    for doc_id, data in tldr_pages(path):
        text = data.decode("utf-8")
        documents.append(
            Document(doc_id=doc_id, title=markdown_title(text), text=text, title_in_text=True)
        )
    return documents


def load_dataset(name: str, root: Path) -> Dataset:
    """Read one set; raise FileNotFoundError with the path when it is missing."""
    base = root / name
    if name == "tldr":
        documents = _read_tldr_archive(base / "tldr-pages.tar.gz")
    else:
        documents = _read_corpus(base / "corpus.jsonl")
    return Dataset(
        name=name,
        documents=documents,
        queries=_read_queries(base / "queries.jsonl"),
        qrels=_read_qrels(base / "qrels.tsv"),
    )
