"""The file tree the speed harness collects: real text, replicated up to a size in chunks.

Four sources, all real text: the tldr pages (markdown, English and Chinese), the squad-long
articles (``.md``, title as the ``#`` heading), the Cranfield abstracts (``.txt``, title as
the first line) and the running interpreter's standard library (``.py``, tests excluded).

A first pass chunks every source file once with the package's own processors, so the number
of chunks each file becomes is known exactly. The files are then interleaved so that any
prefix of the order holds every source in proportion (each source in a seeded random order),
and the plan takes whole copies of that order plus a prefix of one more copy until the size
is reached. Copy ``N`` lives under ``copy-N/`` and, from copy 1 on, ends with a small token
of its own (``kacopyN``), so no two files have the same path or the same content.
"""

from __future__ import annotations

import json
import os
import random
import re
import sys
import sysconfig
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from benchmarks.datasets import tldr_pages
from knowledge_agent.chunking import ChunkConfig
from knowledge_agent.errors import IngestError
from knowledge_agent.processors import process_bytes

SOURCE_NAMES = ("tldr", "squad-long", "cranfield", "stdlib")

# Standard library folders left out: tests, third-party packages, and the folder names the
# package's walker skips by default (the stdlib's own ``venv`` package among them).
_STDLIB_SKIP = frozenset(
    {"test", "tests", "idle_test", "site-packages", "dist-packages", "__pycache__"}
    | {"venv", "build", "dist", "node_modules"}
)
_UNSAFE_NAME_RE = re.compile(r"[^\w.-]+")


@dataclass(frozen=True)
class SourceFile:
    """One base file: where it goes under a copy folder, its bytes, its chunk count."""

    source: str
    relative: str
    data: bytes
    chunks: int = 0


@dataclass(frozen=True)
class PlannedFile:
    """One file of the tree to write: a base file in copy ``copy``."""

    copy: int
    base: SourceFile

    @property
    def relative(self) -> str:
        return f"copy-{self.copy}/{self.base.relative}"

    def data(self) -> bytes:
        """The base bytes, with the copy's token appended from copy 1 on."""
        if self.copy == 0:
            return self.base.data
        return self.base.data + copy_marker(self.copy, self.base.relative)


@dataclass(frozen=True)
class TreeSummary:
    """What was written: files, bytes, planned chunks, files and chunks per source."""

    files: int
    bytes: int
    planned_chunks: int
    copies: int
    per_source: dict[str, dict[str, int]]

    def to_dict(self) -> dict[str, object]:
        return {
            "files": self.files,
            "bytes": self.bytes,
            "planned_chunks": self.planned_chunks,
            "copies": self.copies,
            "per_source": self.per_source,
        }


def copy_marker(copy: int, relative: str) -> bytes:
    """The token that makes copy ``copy`` of a file distinct (a comment in Python files)."""
    token = f"kacopy{copy}"
    if relative.endswith(".py"):
        return f"\n# {token}\n".encode()
    return f"\n\n{token}\n".encode()


def _safe_name(doc_id: str) -> str:
    return _UNSAFE_NAME_RE.sub("_", doc_id).strip("._") or "doc"


def _read_jsonl(path: Path) -> Iterator[dict]:
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                yield json.loads(line)


def tldr_files(datasets: Path) -> list[SourceFile]:
    """The markdown pages of the tldr archive, under ``tldr/``."""
    archive = datasets / "tldr" / "tldr-pages.tar.gz"
    return [SourceFile("tldr", f"tldr/{name}", data) for name, data in tldr_pages(archive)]


def squad_files(datasets: Path) -> list[SourceFile]:
    """Each squad-long article as ``squad-long/<id>.md`` with its title as the ``#`` heading."""
    return [
        SourceFile(
            "squad-long",
            f"squad-long/{_safe_name(str(row['_id']))}.md",
            f"# {row.get('title') or row['_id']}\n\n{row.get('text') or ''}\n".encode(),
        )
        for row in _read_jsonl(datasets / "squad-long" / "corpus.jsonl")
    ]


def cranfield_files(datasets: Path) -> list[SourceFile]:
    """Each Cranfield abstract as ``cranfield/<id>.txt``, its title as the first line."""
    return [
        SourceFile(
            "cranfield",
            f"cranfield/{_safe_name(str(row['_id']))}.txt",
            f"{row.get('title') or row['_id']}\n\n{row.get('text') or ''}\n".encode(),
        )
        for row in _read_jsonl(datasets / "cranfield" / "corpus.jsonl")
    ]


def stdlib_files(stdlib: Path | None = None) -> list[SourceFile]:
    """The ``.py`` files of the interpreter's standard library, under ``stdlib/``."""
    root = stdlib or Path(sysconfig.get_paths()["stdlib"])
    files = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in _STDLIB_SKIP and not d.startswith("."))
        for name in sorted(names):
            if name.endswith(".py") and not name.startswith("."):
                path = Path(folder) / name
                relative = path.relative_to(root).as_posix()
                files.append(SourceFile("stdlib", f"stdlib/{relative}", path.read_bytes()))
    return files


def load_sources(datasets: Path) -> list[SourceFile]:
    """Every base file of the four sources (chunk counts not yet known)."""
    return [
        *tldr_files(datasets),
        *squad_files(datasets),
        *cranfield_files(datasets),
        *stdlib_files(),
    ]


def count_chunks(
    files: Iterable[SourceFile], config: ChunkConfig | None = None
) -> list[SourceFile]:
    """The files with the number of chunks the package makes of each (0 when it skips one)."""
    counted = []
    for file in files:
        try:
            chunks = len(process_bytes(file.data, file.relative, config).chunks)
        except IngestError:
            chunks = 0
        counted.append(SourceFile(file.source, file.relative, file.data, chunks))
    return counted


def interleave(files: Iterable[SourceFile], seed: int = 0) -> list[SourceFile]:
    """Files ordered so every prefix holds each source in proportion to its chunks.

    Within a source the order is a seeded shuffle (a prefix is a sample, not the first
    folder alphabetically); across sources, files are merged by their position as a
    fraction of their source's chunks.
    """
    by_source: dict[str, list[SourceFile]] = {}
    for file in files:
        if file.chunks > 0:
            by_source.setdefault(file.source, []).append(file)
    keyed: list[tuple[float, str, int, SourceFile]] = []
    for source, members in by_source.items():
        members = sorted(members, key=lambda f: f.relative)
        random.Random(f"{seed}:{source}").shuffle(members)
        total = sum(f.chunks for f in members)
        done = 0
        for position, file in enumerate(members):
            keyed.append(((done + file.chunks / 2) / total, source, position, file))
            done += file.chunks
    keyed.sort(key=lambda entry: entry[:3])
    return [entry[3] for entry in keyed]


def plan(order: list[SourceFile], target_chunks: int) -> list[PlannedFile]:
    """Whole copies of ``order`` and a prefix of one more, until ``target_chunks`` is reached."""
    per_copy = sum(f.chunks for f in order)
    if per_copy <= 0:
        raise ValueError("no source file produced a chunk")
    planned: list[PlannedFile] = []
    total = copy = 0
    while total < target_chunks:
        for file in order:
            planned.append(PlannedFile(copy, file))
            total += file.chunks
            if total >= target_chunks:
                break
        copy += 1
    return planned


def write_tree(planned: list[PlannedFile], root: Path) -> TreeSummary:
    """Write the planned files under ``root``; returns what was written."""
    per_source: dict[str, dict[str, int]] = {}
    size = chunks = 0
    for file in planned:
        path = root / file.relative
        path.parent.mkdir(parents=True, exist_ok=True)
        data = file.data()
        path.write_bytes(data)
        size += len(data)
        chunks += file.base.chunks
        counts = per_source.setdefault(file.base.source, {"files": 0, "chunks": 0, "bytes": 0})
        counts["files"] += 1
        counts["chunks"] += file.base.chunks
        counts["bytes"] += len(data)
    copies = max((f.copy for f in planned), default=-1) + 1
    return TreeSummary(len(planned), size, chunks, copies, per_source)


def pick_edit_file(planned: list[PlannedFile], root: Path) -> Path:
    """The file the incremental measurement edits: a median-sized tldr page of copy 0."""
    pages = sorted(
        (f for f in planned if f.copy == 0 and f.base.source == "tldr"),
        key=lambda f: (len(f.base.data), f.relative),
    )
    candidates = pages or sorted(planned, key=lambda f: (len(f.base.data), f.relative))
    return root / candidates[len(candidates) // 2].relative


def build_tree(
    datasets: Path,
    root: Path,
    target_chunks: int,
    *,
    seed: int = 0,
    log: Callable[[str], None] = lambda message: print(message, file=sys.stderr),
) -> tuple[TreeSummary, Path]:
    """Read the sources, count their chunks, write the planned tree; returns it and the file
    to edit."""
    started = time.perf_counter()
    files = load_sources(datasets)
    log(f"  read {len(files):,} source files in {time.perf_counter() - started:.1f} s")
    started = time.perf_counter()
    counted = count_chunks(files)
    per_copy = sum(f.chunks for f in counted)
    log(
        f"  first pass: {per_copy:,} chunks in one copy of the sources "
        f"({time.perf_counter() - started:.1f} s)"
    )
    planned = plan(interleave(counted, seed), target_chunks)
    started = time.perf_counter()
    summary = write_tree(planned, root)
    log(
        f"  wrote {summary.files:,} files, {summary.bytes / 1e6:.1f} MB, "
        f"{summary.copies} cop{'y' if summary.copies == 1 else 'ies'} "
        f"({time.perf_counter() - started:.1f} s)"
    )
    return summary, pick_edit_file(planned, root)


def load_queries(datasets: Path, count: int, seed: int = 0) -> list[str]:
    """``count`` queries taken in turn from four pools: tldr English, tldr Chinese, squad-long
    and Cranfield (each pool in a seeded random order; a pool that runs out is skipped)."""
    pools: dict[str, list[str]] = {"tldr-en": [], "tldr-zh": [], "squad-long": [], "cranfield": []}
    for name in ("tldr", "squad-long", "cranfield"):
        for row in _read_jsonl(datasets / name / "queries.jsonl"):
            text = str(row.get("text") or "").strip()
            if text:
                pool = f"tldr-{row.get('lang') or 'en'}" if name == "tldr" else name
                pools.setdefault(pool, []).append(text)
    for pool, texts in pools.items():
        random.Random(f"{seed}:{pool}").shuffle(texts)
    queries: list[str] = []
    position = 0
    while len(queries) < count and any(position < len(texts) for texts in pools.values()):
        for texts in pools.values():
            if position < len(texts) and len(queries) < count:
                queries.append(texts[position])
        position += 1
    return queries
