"""Speed and scale of knowledge_agent beside SQLite FTS5 and bm25s, measured in one run.

    python benchmarks/speed.py --size 10k                      # about a minute here
    python benchmarks/speed.py --size 100k --json speed.json   # about 5 minutes
    python benchmarks/speed.py --size 100k --keep /tmp/kb100k  # build once, keep it
    python benchmarks/speed.py --reuse /tmp/kb100k             # measure again, no ingest
    python benchmarks/speed.py --size 10k --profile 50         # + cProfile of hybrid queries
    python benchmarks/speed.py --only writes                   # the small figures alone, < 1 min
    python benchmarks/speed.py --backend postgresql --size 10k # local beside a PostgreSQL database

Real text (the tldr pages, squad-long and Cranfield from ../shared/datasets or --datasets DIR,
and this interpreter's standard library) is written as files into a folder, replicated under
``copy-N/`` only as far as needed to reach ``--size`` chunks (see benchmarks/speed_corpus.py),
and collected with ``collect_knowledge`` into a fresh on-disk knowledge base. Then, at that
size: query latency (hybrid two-stage, keyword-only, semantic-only; warm), one changed file
re-indexed (the watcher's path, ``collect_knowledge(file)`` and a re-run over the collected
folder) against a full TF-IDF refit, open + first query in a new process, peak RSS and the
size on disk. SQLite FTS5 and bm25s index the package's own chunks (read back from its SQLite
store) and answer the same queries.

A section of its own, the same at any size and with ``--reuse`` (alone with ``--only
writes``), measures small figures in a new process (benchmarks/speed_writes.py): 1,000
``add_text`` one by one into a fresh on-disk base then one search and close, ms per add and
each add's p50/p95/max, beside single committed FTS5 inserts; an in-memory open + 20 adds +
search + close, median of 30 runs, beside FTS5 in ``:memory:``; and ``knowledge-agent
--version`` / ``import knowledge_agent`` wall time. A table per section goes to stdout,
progress to stderr.

Times on a shared machine are noise; the ratios to the references carry across machines.
``--keep DIR`` leaves the files and the knowledge base in DIR; ``--reuse DIR`` measures such
a base again and reports the ingest figures recorded when it was built.

``--backend postgresql`` collects the tree into a local data folder and into a PostgreSQL
database (an embedded server started here, or a new database on the server of
``--backend-url``) and reports ingest and query latency of both side by side, with the CPU
seconds of client, workers and server during each ingest (benchmarks/speed_postgres.py);
``--profile-ingest N`` adds a cProfile of the database's ingest. For the local backend,
``--profile-ingest N`` cProfiles its ingest (this process; the extraction workers' CPU seconds
beside): own CPU seconds by area and the top ``N`` functions, to stderr and the JSON (under
``ingest``). Profiling slows the ingest it measures.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import multiprocessing
import os
import pstats
import re
import resource
import shlex
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: import the harness as the `benchmarks` package
    sys.path[0] = str(Path(__file__).resolve().parents[1])

try:
    import bm25s  # noqa: F401  (the reference systems need the `bench` extra)
    import Stemmer  # noqa: F401
except ImportError as exc:
    sys.exit(f"{exc}: install the bench extra first: pip install -e '.[bench]'")

from benchmarks.datasets import default_datasets_dir
from benchmarks.speed_corpus import build_tree, load_queries
from benchmarks.speed_measure import (
    ColdOpen,
    Latency,
    cold_open,
    machine,
    median_cold_open,
    peak_rss_mb,
    time_queries,
)
from benchmarks.speed_references import (
    Bm25sReference,
    ChunkTexts,
    Fts5Reference,
    read_chunk_texts,
    stored_pairs,
)
from benchmarks.speed_report import WRITE_TARGETS, Row, render, size_label, targets_for
from benchmarks.speed_writes import measure_writes, write_rows
from knowledge_agent import KnowledgeAgentCore
from knowledge_agent.errors import NotFoundError
from knowledge_agent.ingest import CollectProgress, CollectReport, WalkOptions

MANIFEST = "speed-manifest.json"
MODES = ("hybrid", "keyword", "semantic")
# tldr has pages named `..md`; nothing else in the tree is hidden.
WALK_OPTIONS = WalkOptions(include_hidden=True)
_STARTED = time.perf_counter()


def log(message: str) -> None:
    """Progress on stderr, with the seconds since the run started."""
    print(f"[{time.perf_counter() - _STARTED:7.1f} s] {message}", file=sys.stderr, flush=True)


def parse_size(text: str) -> int:
    """'10k' → 10000, '1m' → 1000000, '25000' → 25000."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kKmM]?)\s*", text)
    if not match:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (use e.g. 10k, 100k, 1m)")
    scale = {"": 1, "k": 1_000, "m": 1_000_000}[match.group(2).lower()]
    size = int(float(match.group(1)) * scale)
    if size < 1:
        raise argparse.ArgumentTypeError("the size must be at least 1 chunk")
    return size


# -- where the files and the knowledge base live -----------------------------------------------


@dataclass(frozen=True)
class Workspace:
    """The collected files, the knowledge base, and the manifest of a kept base."""

    root: Path
    reused: bool

    @property
    def files(self) -> Path:
        return self.root / "files"

    @property
    def kb(self) -> Path:
        return self.root / "kb"

    @property
    def manifest(self) -> Path:
        return self.root / MANIFEST

    def read_manifest(self) -> dict[str, Any]:
        return json.loads(self.manifest.read_text(encoding="utf-8"))

    def write_manifest(self, manifest: dict[str, Any]) -> None:
        text = json.dumps(manifest, indent=2, ensure_ascii=False) + "\n"
        self.manifest.write_text(text, encoding="utf-8")


@contextmanager
def workspace(keep: Path | None, reuse: Path | None) -> Iterator[Workspace]:
    """A temporary folder, or the ``--keep`` folder (must be new or empty), or the ``--reuse``
    folder (must hold a kept base)."""
    if reuse is not None:
        if not (reuse / MANIFEST).is_file():
            raise SystemExit(f"{reuse} holds no {MANIFEST}: build it first with --keep {reuse}")
        yield Workspace(reuse.resolve(), reused=True)
    elif keep is not None:
        if keep.exists() and any(keep.iterdir()):
            raise SystemExit(f"--keep {keep}: the folder is not empty (use --reuse to measure it)")
        keep.mkdir(parents=True, exist_ok=True)
        yield Workspace(keep.resolve(), reused=False)
    else:
        with tempfile.TemporaryDirectory(prefix="ka-speed-") as tmp:
            yield Workspace(Path(tmp).resolve(), reused=False)


# -- ingest ------------------------------------------------------------------------------------


class ProgressPrinter:
    """A ``collect_knowledge`` progress callback that logs every ``every`` seconds."""

    def __init__(self, every: float = 15.0) -> None:
        self.every = every
        self._last = time.perf_counter()

    def __call__(self, event: CollectProgress) -> None:
        # Indexing events come between the files' (a collect indexes as it goes), each
        # counting the chunks of one index update.
        now = time.perf_counter()
        if now - self._last < self.every:
            return
        self._last = now
        if event.status == "indexing":
            log(f"  indexing: {event.done:,}/{event.total:,} chunks of an update")
        else:
            log(
                f"  {event.done:,}/{event.total:,} files, "
                f"{event.bytes_done / 1e6:.1f}/{event.bytes_total / 1e6:.1f} MB"
            )


# Where the own time of a profiled ingest goes: the first area naming the function's file or
# built-in (``~:<method 'execute' of 'sqlite3.Connection' objects>``) takes it.
_INGEST_AREAS = (
    ("waiting on workers", ("multiprocessing", "concurrent/futures", "_thread.lock", "select.")),
    ("analysis", ("knowledge_agent/analysis", "whoosh/lang", "whoosh/analysis", "jieba")),
    ("SQLite", ("knowledge_agent/storage", "sqlite3")),
    ("Whoosh", ("knowledge_agent/backends/local/keyword", "/whoosh/")),
    ("TF-IDF", ("knowledge_agent/backends/local/tfidf",)),
    ("dense", ("knowledge_agent/backends/local/dense",)),
    ("segments", ("knowledge_agent/backends/local/segments",)),
    ("walk, read, extract, chunk", ("knowledge_agent/ingest", "processors", "chunking")),
    ("numpy, scipy", ("numpy", "scipy")),
)


def profile_ingest(core: KnowledgeAgentCore, files: Path, top: int) -> dict[str, Any]:
    """:func:`measure_ingest` under cProfile: its figures, the CPU seconds of this process and
    of the extraction workers, own CPU seconds by area and the top ``top`` functions."""
    own0, workers0 = _cpu_seconds()
    # CPU time, not wall time: on a shared machine the wall clock mostly counts other load.
    profiler = cProfile.Profile(time.process_time)
    # Extraction workers forked from here would inherit the profiler and run several times
    # slower, their CPU counted as the ingest's: each stops it first.
    os.register_at_fork(after_in_child=profiler.disable)
    profiler.enable()
    try:
        figures = measure_ingest(core, files)
    finally:
        profiler.disable()
    own1, workers1 = _cpu_seconds()
    stats = pstats.Stats(profiler)
    raw: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    by_area = dict.fromkeys([name for name, _ in _INGEST_AREAS] + ["other"], 0.0)
    for (filename, _, function), entry in raw.items():
        where = f"{filename}:{function}".replace("\\", "/").lower()
        area = next((n for n, keys in _INGEST_AREAS if any(k.lower() in where for k in keys)), None)
        by_area[area or "other"] += entry[2]
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(top)
    figures["profile"] = {
        "cpu_s": {"this_process": round(own1 - own0, 2), "workers": round(workers1 - workers0, 2)},
        "own_seconds_by_area": {k: round(v, 2) for k, v in by_area.items()},
        "top_by_own_time": text.getvalue(),
    }
    return figures


def _cpu_seconds() -> tuple[float, float]:
    """CPU seconds (user + system) of this process and of its reaped children."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


def measure_ingest(core: KnowledgeAgentCore, files: Path) -> dict[str, Any]:
    """Collect the whole tree once: files → SQLite + Whoosh + TF-IDF, end to end."""
    started = time.perf_counter()
    report = core.collect_knowledge(files, walk_options=WALK_OPTIONS, progress=ProgressPrinter())
    seconds = time.perf_counter() - started
    if report.failed or report.skipped:
        log(f"  warning: {len(report.failed)} failed, {len(report.skipped)} skipped files")
    megabytes = report.bytes_processed / 1e6
    return {
        "seconds": round(seconds, 3),
        "files": report.processed,
        "megabytes": round(megabytes, 3),
        "chunks": report.chunks_added,
        "failed": len(report.failed),
        "skipped": len(report.skipped),
        "mb_per_s": round(megabytes / seconds, 4),
        "chunks_per_s": round(report.chunks_added / seconds, 1),
        "files_per_s": round(report.processed / seconds, 1),
        "workers": core.collector.workers,
    }


# -- queries -----------------------------------------------------------------------------------


def measure_package_queries(
    core: KnowledgeAgentCore, queries: list[str], warmup: int
) -> dict[str, tuple[Latency, int]]:
    """Warm latency of each search mode (limit 10, context_window 1)."""
    figures = {}
    for mode in MODES:

        def search(query: str, mode: str = mode) -> object:
            return core.search(query, limit=10, context_window=1, mode=mode)

        figures[mode] = time_queries(search, queries, warmup)
        log(f"  {mode:<8} p50 {figures[mode][0].p50:7.1f} ms  p95 {figures[mode][0].p95:7.1f} ms")
    return figures


def measure_facets(core: KnowledgeAgentCore, queries: list[str], warmup: int) -> dict[str, Any]:
    """Warm latency of a hybrid search that also counts its facets (``search --facets``: the
    documents matching per kb, doc type and source type, before the limit), of the facets
    alone, and the median number of matching documents they count."""

    def with_facets(query: str) -> object:
        results = core.search(query, limit=10, context_window=1)
        return core.facets(query).total or results

    def facets_alone(query: str) -> object:
        return core.facets(query).total

    figures: dict[str, Any] = {
        "hybrid_facets": time_queries(with_facets, queries, warmup),
        "facets": time_queries(facets_alone, queries, warmup),
        "median_matches": statistics.median(core.facets(query).total for query in queries),
    }
    for name in ("hybrid_facets", "facets"):
        latency = figures[name][0]
        log(f"  {name:<13} p50 {latency.p50:7.1f} ms  p95 {latency.p95:7.1f} ms")
    return figures


def profile_hybrid(core: KnowledgeAgentCore, queries: list[str], top: int = 25) -> None:
    """cProfile ``queries`` hybrid searches; print the top functions of the package, then of
    Whoosh, by cumulative time to stderr."""
    profiler = cProfile.Profile()
    profiler.enable()
    for query in queries:
        core.search(query, limit=10, context_window=1)
    profiler.disable()
    print(f"\ncProfile of {len(queries)} hybrid queries, by cumulative time:", file=sys.stderr)
    stats = pstats.Stats(profiler, stream=sys.stderr).sort_stats("cumulative")
    for where in ("knowledge_agent", "whoosh"):
        stats.print_stats(rf"[/\\]{where}[/\\]", top)


# -- one changed file --------------------------------------------------------------------------


def write_edit(path: Path, original: bytes, mtime_ns: int, number: int) -> str:
    """Rewrite ``path`` as its original text plus a token of its own and a later mtime."""
    token = f"kaedit{number}quokka"
    path.write_bytes(original + f"\n\n{token}\n".encode())
    os.utime(path, ns=(mtime_ns, mtime_ns + number * 1_000_000_000))
    return token


def check_edit_found(core: KnowledgeAgentCore, token: str, path: Path) -> None:
    """The edited text must be searchable at once, and point at the edited file."""
    results = core.search(token, mode="keyword", context_window=0)
    if not results or results[0].item.source_uri != str(path):
        raise SystemExit(f"check failed: the edit {token!r} of {path} is not searchable")


def timed_edits(
    core: KnowledgeAgentCore,
    path: Path,
    original: bytes,
    mtime_ns: int,
    first: int,
    repeats: int,
    collect: Callable[[], CollectReport | None],
) -> list[float]:
    """Edit ``path`` and time ``collect`` ``repeats`` times; returns milliseconds."""
    samples = []
    for number in range(first, first + repeats):
        token = write_edit(path, original, mtime_ns, number)
        started = time.perf_counter()
        report = collect()
        samples.append((time.perf_counter() - started) * 1000)
        if report is not None and report.processed != 1:
            raise SystemExit(f"check failed: one edited file, {report.processed} processed")
        check_edit_found(core, token, path)
    return samples


def restore_file(core: KnowledgeAgentCore, path: Path, files: Path, original: bytes) -> None:
    """Undo the edits and whatever collecting the file on its own left behind (a root of its
    own, a second item), so the knowledge base holds the original file once again."""
    with suppress(NotFoundError):
        core.remove_source(path)
    for item in core.storage.items_with_source(str(path)):
        core.delete_knowledge_item(item.id)
    path.write_bytes(original)
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**12))
    core.collect_knowledge(files, walk_options=WALK_OPTIONS)


EDIT_WAYS = {  # how one changed file gets re-indexed; "collect" is collect_knowledge
    "watcher": "watcher path",  # collector.apply_changes, as FolderWatcher calls it
    "collect_file": "collect(file)",
    "rerun_folder": "collect(its folder)",
    "rerun_root": "collect(root)",  # a re-run over the whole collected tree
}


def measure_one_file(
    core: KnowledgeAgentCore, files: Path, path: Path, repeats: int
) -> dict[str, Any]:
    """One changed file re-indexed each way of ``EDIT_WAYS``, ``repeats`` edits a way; then the
    original is put back. Milliseconds per edit, and the items the edits added (should be 0)."""
    original, mtime_ns = path.read_bytes(), path.stat().st_mtime_ns
    items, chunks = core.storage.count_items(), core.storage.count_chunks()

    def watcher_path() -> CollectReport:
        with core.batch():  # what FolderWatcher does when it sees the file change
            return core.collector.apply_changes("default", str(files), WALK_OPTIONS, [path], [])

    ways: dict[str, Callable[[], CollectReport | None]] = {
        "watcher": watcher_path,
        "collect_file": lambda: core.collect_knowledge(path),
        "rerun_folder": lambda: core.collect_knowledge(path.parent, walk_options=WALK_OPTIONS),
        "rerun_root": lambda: core.collect_knowledge(files, walk_options=WALK_OPTIONS),
    }
    result: dict[str, Any] = {
        "file": str(path.relative_to(files)),
        "file_bytes": len(original),
        "folder_files": sum(1 for p in path.parent.iterdir() if p.is_file()),
        "repeats": repeats,
    }
    for number, (way, collect) in enumerate(ways.items()):
        samples = timed_edits(
            core, path, original, mtime_ns, 1 + number * repeats, repeats, collect
        )
        result[f"{way}_ms"] = [round(x, 2) for x in samples]
        log(f"  {EDIT_WAYS[way]}: {statistics.median(samples):.0f} ms")
    result["extra_items"] = core.storage.count_items() - items
    restore_file(core, path, files, original)
    if (core.storage.count_items(), core.storage.count_chunks()) != (items, chunks):
        log("  warning: the knowledge base did not return to its size before the edits")
    return result


def measure_tfidf_refit(core: KnowledgeAgentCore) -> float:
    """A full TF-IDF refit over every stored item, read as ``SearchEngineImpl.rebuild`` reads
    them; the journal position the index reflects is put back afterwards. Seconds."""
    searcher = core.semantic_searcher
    applied = searcher.applied_seq
    started = time.perf_counter()
    searcher.fit_chunks(stored_pairs(core.storage))
    seconds = time.perf_counter() - started
    searcher.set_applied_seq(applied)
    return seconds


# -- references --------------------------------------------------------------------------------


def measure_references(
    texts: ChunkTexts, queries: list[str], warmup: int, folder: Path
) -> dict[str, Any]:
    """FTS5 (in a file under ``folder``) and bm25s over the same chunks and queries."""
    figures: dict[str, Any] = {}
    for reference in (Fts5Reference(folder / "fts5.sqlite3"), Bm25sReference()):
        try:
            seconds = reference.index(texts)
            latency, empty = time_queries(reference.search, queries, warmup)
            figures[reference.name] = {
                "index_s": round(seconds, 3),
                "latency_ms": latency.to_dict(),
                "empty_results": empty,
            }
            if isinstance(reference, Fts5Reference):
                figures[reference.name]["disk_bytes"] = reference.disk_bytes()
            log(
                f"  {reference.name:<6} index {seconds:6.1f} s  p50 {latency.p50:6.2f} ms  "
                f"p95 {latency.p95:6.2f} ms"
            )
        finally:
            reference.close()
    return figures


# -- the small figures -------------------------------------------------------------------------


def measure_writes_apart(args: argparse.Namespace) -> dict[str, Any]:
    """The write and start-up figures (benchmarks/speed_writes.py) in a new process: the same
    whether or not this one holds a large base, and its memory stays out of this one's peak."""
    log("writes and start-up, independent of the size, in a new process")
    spawn = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=1, mp_context=spawn) as pool:
        datasets = args.datasets or default_datasets_dir()
        writes: dict[str, Any] = pool.submit(measure_writes, datasets, seed=args.seed).result()
    log(f"  {writes['seconds']:.0f} s")
    return writes


# -- the run -----------------------------------------------------------------------------------


def prepare(ws: Workspace, args: argparse.Namespace) -> dict[str, Any]:
    """Write the tree (new base) or read the manifest (reused base)."""
    if ws.reused:
        manifest = ws.read_manifest()
        if args.size is not None and args.size != manifest["size"]:
            raise SystemExit(
                f"--reuse {ws.root} holds a {size_label(manifest['size'])} base, "
                f"not {size_label(args.size)}"
            )
        log(f"reusing the {size_label(manifest['size'])} base in {ws.root}")
        return manifest
    size = args.size or 10_000
    log(f"writing real text for {size_label(size)} chunks into {ws.files}")
    datasets = args.datasets or default_datasets_dir()
    # In a process of its own, so this one's peak RSS stays the package's.
    spawn = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=1, mp_context=spawn) as pool:
        summary, edit_file = pool.submit(
            build_tree, datasets, ws.files, size, seed=args.seed
        ).result()
    return {
        "size": size,
        "tree": summary.to_dict(),
        "edit_file": str(edit_file.relative_to(ws.files)),
        "built_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


def measure_package(
    core: KnowledgeAgentCore,
    ws: Workspace,
    manifest: dict[str, Any],
    queries: list[str],
    args: argparse.Namespace,
) -> dict[str, Any]:
    """Ingest (new base), queries, one changed file, TF-IDF refit; this process's peak RSS
    after each step (the peak only grows: a jump says which step needed the memory)."""
    result: dict[str, Any] = {"rss_checkpoints_mb": {"opened": peak_rss_mb()}}
    checkpoints = result["rss_checkpoints_mb"]
    if ws.reused:
        result["ingest"] = {**manifest["ingest"], "from_build_at": manifest["built_at"]}
    else:
        log("collecting the files into a fresh knowledge base")
        if args.profile_ingest:
            ingest = profile_ingest(core, ws.files, args.profile_ingest)
            profile = ingest["profile"]
            areas = ", ".join(f"{k} {v:.1f}" for k, v in profile["own_seconds_by_area"].items())
            log(f"  cProfile of the ingest, CPU s {profile['cpu_s']}; own CPU s: {areas}")
            print(profile["top_by_own_time"], file=sys.stderr)
        else:
            ingest = measure_ingest(core, ws.files)
        result["ingest"] = manifest["ingest"] = ingest
        log(f"  {result['ingest']['seconds']:.1f} s, {result['ingest']['mb_per_s']} MB/s")
        checkpoints["ingest"] = peak_rss_mb()
        if args.keep:
            ws.write_manifest(manifest)
    status = core.status()
    result["items"], result["chunks"] = status.items, status.chunks
    log(f"{status.chunks:,} chunks in {status.items:,} items; {len(queries)} queries")
    result["package_latency"] = measure_package_queries(core, queries, args.warmup)
    result["facets_latency"] = measure_facets(core, queries, args.warmup)
    checkpoints["queries"] = peak_rss_mb()
    if args.profile:
        profile_hybrid(core, queries[: args.profile])
    log(f"one changed file ({manifest['edit_file']}), {args.edits} edits a way")
    edited = ws.files / manifest["edit_file"]
    result["one_file"] = measure_one_file(core, ws.files, edited, args.edits)
    checkpoints["one_file"] = peak_rss_mb()
    log("full TF-IDF refit")
    result["tfidf_refit_s"] = measure_tfidf_refit(core)
    log(f"  {result['tfidf_refit_s']:.1f} s")
    checkpoints["tfidf_refit"] = peak_rss_mb()
    result["disk_bytes"] = core.status().sizes
    result["peak_rss_mb"] = peak_rss_mb()
    return result


def run(ws: Workspace, args: argparse.Namespace) -> dict[str, Any]:
    """Every measurement, in an order that keeps the package's peak RSS its own: the package
    first, then a new process opening the base, then the references."""
    manifest = prepare(ws, args)
    queries = load_queries(args.datasets or default_datasets_dir(), args.queries, args.seed)
    args.warmup = min(args.warmup, len(queries))
    result: dict[str, Any] = {"size": manifest["size"], "tree": manifest["tree"]}
    with KnowledgeAgentCore(ws.kb, workers=args.workers) as core:
        result.update(measure_package(core, ws, manifest, queries, args))
        texts = read_chunk_texts(core.storage)
    log(f"open + first query in a new process, {args.cold_runs} runs")
    runs = [cold_open(ws.kb, queries[0]) for _ in range(args.cold_runs)]
    result["cold_open"] = cold = median_cold_open(runs)
    result["cold_open_runs"] = [r.to_dict() for r in runs]
    log(f"  {cold.total_s:.2f} s in the child, {cold.wall_s:.2f} s wall")
    log(f"reference engines over the same {len(texts.ids):,} chunks")
    with tempfile.TemporaryDirectory(prefix="ka-speed-fts5-") as tmp:
        result["references"] = measure_references(texts, queries, args.warmup, Path(tmp))
    result["peak_rss_with_references_mb"] = peak_rss_mb()
    result["queries"], result["warmup"] = len(queries), args.warmup
    return result


def _ingest_rows(result: dict[str, Any]) -> list[Row]:
    ingest, refs = result["ingest"], result["references"]
    fts5, bm25 = refs["fts5"]["index_s"], refs["bm25s"]["index_s"]
    megabytes, chunks = ingest["megabytes"], ingest["chunks"]
    note = "recorded when the base was built" if "from_build_at" in ingest else ""
    return [
        Row("chunks", "chunks", result["chunks"], 0),
        Row("items", "items (files)", result["items"], 0),
        Row("ingest_mb", "text collected, MB", megabytes, 2),
        Row("ingest_s", "ingest, s", ingest["seconds"], 2, fts5, bm25, note),
        Row("ingest_mb_s", "ingest, MB/s", ingest["mb_per_s"], 3,
            megabytes / fts5, megabytes / bm25, note),
        Row("ingest_vs_fts5", "ingest MB/s ÷ FTS5's", ingest["mb_per_s"] / (megabytes / fts5),
            3, note="FTS5: one transaction of the chunk texts"),
        Row("ingest_chunks_s", "ingest, chunks/s", ingest["chunks_per_s"], 0,
            chunks / fts5, chunks / bm25, note),
    ]  # fmt: skip


def _latency_rows(result: dict[str, Any]) -> list[Row]:
    fts5, bm25 = (result["references"][name]["latency_ms"] for name in ("fts5", "bm25s"))
    rows = []
    for mode in MODES:
        latency: Latency = result["package_latency"][mode][0]
        for stat in ("p50", "p95", "p99"):
            value = getattr(latency, stat)
            rows.append(Row(f"{mode}_{stat}_ms", f"{mode} {stat}, ms", value, 1,
                            fts5[stat], bm25[stat]))  # fmt: skip
    facets = result["facets_latency"]
    matches = f"median {facets['median_matches']:,.0f} matching documents counted"
    for name, label, note in (
        ("hybrid_facets", "hybrid + facets", matches),
        ("facets", "  facets alone", ""),
    ):
        latency = facets[name][0]
        rows += [
            Row(f"{name}_p50_ms", f"{label} p50, ms", latency.p50, 1, note=note),
            Row(f"{name}_p95_ms", f"{label} p95, ms", latency.p95, 1),
        ]
    return rows


def _one_file_rows(result: dict[str, Any]) -> list[Row]:
    one = result["one_file"]
    extra = one["extra_items"]
    note = f"{extra:+d} items after the edits" if extra else ""
    rows = [
        Row(f"edit_{way}_ms", f"1 file: {label}, ms", statistics.median(one[f"{way}_ms"]), 0,
            note=note)
        for way, label in EDIT_WAYS.items()
    ]  # fmt: skip
    rows.append(Row("tfidf_refit_ms", "full TF-IDF refit, ms", result["tfidf_refit_s"] * 1000, 0))
    return rows


def _process_rows(result: dict[str, Any]) -> list[Row]:
    cold: ColdOpen = result["cold_open"]
    checkpoints = result["rss_checkpoints_mb"]
    reused = "reused base: no ingest" if "from_build_at" in result["ingest"] else ""
    return [
        Row("cold_total_s", "open + 1st query (in child), s", cold.total_s, 2,
            note="new process: import, open, search"),
        Row("cold_import_s", "  import, s", cold.import_s, 2),
        Row("cold_open_s", "  open, s", cold.open_s, 2),
        Row("cold_query_s", "  first query, s", cold.first_query_s, 2),
        Row("cold_wall_s", "open + 1st query, wall, s", cold.wall_s, 2,
            note="interpreter start included"),
        Row("peak_rss_mb", "peak RSS, this process, MB", result["peak_rss_mb"], 0,
            note=reused or "ingest, queries, edits, refit"),
        Row("rss_ingest_mb", "  by the end of the ingest", checkpoints.get("ingest"), 0),
        Row("rss_queries_mb", "  by the end of the queries", checkpoints["queries"], 0),
        Row("cold_peak_rss_mb", "peak RSS, open + 1st query, MB", cold.peak_rss_mb, 0,
            note="the new process"),
        Row("rss_with_refs_mb", "peak RSS, with the references, MB",
            result["peak_rss_with_references_mb"], 0),
    ]  # fmt: skip


def _disk_rows(result: dict[str, Any]) -> list[Row]:
    disk = {key: value / 1e6 for key, value in result["disk_bytes"].items()}
    fts5 = result["references"]["fts5"]["disk_bytes"] / 1e6
    return [
        Row("disk_sqlite_mb", "disk: SQLite, MB", disk.get("database"), 1),
        Row("disk_whoosh_mb", "disk: Whoosh, MB", disk.get("keyword_index"), 1),
        Row("disk_tfidf_mb", "disk: TF-IDF, MB", disk.get("semantic_index"), 1),
        Row("disk_total_mb", "disk: total, MB", sum(disk.values()), 1, fts5),
    ]


def table_rows(result: dict[str, Any]) -> list[Row]:
    """The figures of one run as table rows."""
    return [
        *_ingest_rows(result),
        *_latency_rows(result),
        *_one_file_rows(result),
        *_process_rows(result),
        *_disk_rows(result),
    ]


def report_sized(result: dict[str, Any], args: argparse.Namespace) -> tuple[list[Row], dict]:
    """Print the table of the figures at the run's size; returns its rows and their JSON."""
    rows = table_rows(result)
    chunks = result["chunks"]
    print(
        f"== {size_label(result['size'])} requested: {chunks:,} chunks, {result['items']:,} "
        f"items; {result['queries']} queries (tldr en/zh, squad-long, Cranfield), "
        f"{result['warmup']} warm-up; one-file figures are medians of {args.edits} edits"
    )
    print(render(rows, targets_for(result["size"]), result["size"]))
    return rows, {
        "size": result["size"],
        "chunks": chunks,
        "items": result["items"],
        "tree": result["tree"],
        "queries": result["queries"],
        "warmup": result["warmup"],
        "ingest": result["ingest"],
        "latency_ms": {
            mode: {**latency.to_dict(), "empty_results": empty}
            for mode, (latency, empty) in result["package_latency"].items()
        },
        "facets_latency_ms": {
            name: value[0].to_dict() if isinstance(value, tuple) else value
            for name, value in result["facets_latency"].items()
        },
        "one_file": result["one_file"],
        "tfidf_refit_s": round(result["tfidf_refit_s"], 3),
        "cold_open": result["cold_open"].to_dict(),
        "cold_open_runs": result["cold_open_runs"],
        "peak_rss_mb": round(result["peak_rss_mb"], 1),
        "rss_checkpoints_mb": {k: round(v, 1) for k, v in result["rss_checkpoints_mb"].items()},
        "peak_rss_with_references_mb": round(result["peak_rss_with_references_mb"], 1),
        "disk_bytes": result["disk_bytes"],
        "references": result["references"],
    }


def report_writes(writes: dict[str, Any]) -> list[Row]:
    """Print the table of the write and start-up figures; returns its rows."""
    texts = writes["texts"]
    print(
        f"== writes and start-up, at any size: {texts['count']:,} real texts (tldr pages, "
        f"squad-long paragraphs; median {texts['median_bytes']:,.0f} B)"
    )
    rows = write_rows(writes)
    print(render(rows, WRITE_TARGETS, None))
    return rows


def report(
    result: dict[str, Any] | None,
    writes: dict[str, Any],
    env: dict[str, Any],
    args: argparse.Namespace,
) -> dict:
    """Print the tables (the sized one only when ``result`` is given); returns the
    machine-readable figures."""
    print(
        f"environment: {env['cores']} cores, {env['implementation']} {env['python']}, "
        f"{env['platform']}, sqlite {env['sqlite']}, bm25s {env['bm25s']}, "
        f"knowledge_agent {env['knowledge_agent']}; load average "
        f"{env['load_average_at_start']} at start, {env['load_average_at_end']} at end"
    )
    rows: list[Row] = []
    sized: dict[str, Any] = {}
    if result is not None:
        rows, sized = report_sized(result, args)
        print()
    rows += report_writes(writes)
    targets = dict(WRITE_TARGETS) if result is None else targets_for(result["size"])
    figures = {row.key: None if row.value is None else round(row.value, 4) for row in rows}
    return {
        "command": shlex.join(["python", "benchmarks/speed.py", *sys.argv[1:]]),
        "environment": env,
        **sized,
        "writes": writes,
        "figures": figures,
        "targets": {
            key: {
                **target.to_dict(),
                "value": (value := figures.get(key)),
                "met": None if value is None else target.met(value),
            }
            for key, target in targets.items()
        },
        "total_seconds": round(time.perf_counter() - _STARTED, 1),
    }


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Speed and scale of knowledge_agent beside SQLite FTS5 and bm25s."
    )
    parser.add_argument(
        "--size",
        type=parse_size,
        default=None,
        metavar="N",
        help="chunks in the knowledge base: 10k, 100k, 1m, ... (default 10k)",
    )
    parser.add_argument(
        "--datasets",
        type=Path,
        default=None,
        metavar="DIR",
        help="the data sets folder (default: $KNOWLEDGE_AGENT_DATASETS, else "
        "../shared/datasets from the project root)",
    )
    parser.add_argument(
        "--queries",
        type=int,
        default=300,
        metavar="N",
        help="timed queries per engine and mode (default 300)",
    )
    parser.add_argument(
        "--warmup",
        type=int,
        default=20,
        metavar="N",
        help="untimed queries first, per engine and mode (default 20)",
    )
    parser.add_argument(
        "--edits",
        type=int,
        default=3,
        metavar="N",
        help="edits timed per way of re-indexing one file (default 3)",
    )
    parser.add_argument(
        "--cold-runs",
        type=int,
        default=3,
        metavar="N",
        help="new processes opening the base; the median is reported",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=None,
        metavar="N",
        help="extraction processes (default: the package's choice)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of file order and queries")
    parser.add_argument(
        "--profile",
        type=int,
        default=0,
        metavar="N",
        help="also cProfile N hybrid queries (top functions to stderr)",
    )
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--keep",
        type=Path,
        default=None,
        metavar="DIR",
        help="build the files and the knowledge base in DIR and keep them",
    )
    where.add_argument(
        "--reuse",
        type=Path,
        default=None,
        metavar="DIR",
        help="measure the base kept in DIR again (no ingest)",
    )
    parser.add_argument(
        "--only",
        choices=("writes",),
        default=None,
        help="writes: only the write and start-up figures (no corpus, no base; under a minute)",
    )
    parser.add_argument(
        "--backend",
        choices=("local", "postgresql"),
        default="local",
        help="postgresql: the local data folder beside a PostgreSQL database (ingest, queries)",
    )
    parser.add_argument(
        "--backend-url",
        default=None,
        metavar="URL",
        help="with --backend postgresql: a server whose user may create databases (default: "
        "an embedded server started for the run)",
    )
    parser.add_argument(
        "--profile-ingest",
        type=int,
        default=0,
        metavar="N",
        help="cProfile the ingest (top N functions by own time, to stderr; with --backend "
        "postgresql: the database's ingest); the profiled ingest runs slower",
    )
    parser.add_argument("--json", type=Path, default=None, metavar="FILE",
                        help="write the figures here")  # fmt: skip
    args = parser.parse_args(argv)
    if args.backend == "postgresql" and (args.reuse or args.only):
        parser.error("--backend postgresql measures a fresh ingest: no --reuse, no --only")
    if args.backend != "postgresql" and args.backend_url:
        parser.error("--backend-url needs --backend postgresql")
    if args.profile_ingest and args.reuse:
        parser.error("--profile-ingest measures a fresh ingest: no --reuse")
    for name in ("queries", "edits", "cold_runs"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    env = machine()
    if args.backend == "postgresql":
        return main_postgres(args, env)
    result = None
    if args.only != "writes":
        with workspace(args.keep, args.reuse) as ws:
            result = run(ws, args)
    writes = measure_writes_apart(args)
    env["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    figures = report(result, writes, env, args)
    log(f"done in {figures['total_seconds']:.0f} s")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2, ensure_ascii=False) + "\n")
    return 0


def main_postgres(args: argparse.Namespace, env: dict[str, Any]) -> int:
    """``--backend postgresql``: the local data folder beside a database, one table."""
    from benchmarks import speed_postgres

    with workspace(args.keep, None) as ws:
        result = speed_postgres.run(ws, args, sys.modules[__name__])
    env["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    print(
        f"environment: {env['cores']} cores, {env['implementation']} {env['python']}, "
        f"{env['platform']}, knowledge_agent {env['knowledge_agent']}; load average "
        f"{env['load_average_at_start']} at start, {env['load_average_at_end']} at end"
    )
    text, goals = speed_postgres.table(result)
    print(text)
    profile = result["postgresql"]["ingest"].get("profile")
    if profile:
        print(
            f"\ntop functions of the postgresql ingest by own time:\n{profile['top_by_own_time']}"
        )
    total = round(time.perf_counter() - _STARTED, 1)
    log(f"done in {total:.0f} s")
    if args.json:
        figures = {
            "command": shlex.join(["python", "benchmarks/speed.py", *sys.argv[1:]]),
            "environment": env,
            **speed_postgres.to_json(result),
            "goals": goals,
            "total_seconds": total,
        }
        args.json.write_text(json.dumps(figures, indent=2, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
