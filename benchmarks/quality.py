"""Retrieval quality of knowledge_agent next to reference systems measured in the same run.

    python benchmarks/quality.py                        # every set, every system
    python benchmarks/quality.py --datasets-only cranfield,cmrc2018 --limit-queries 200
    python benchmarks/quality.py --systems knowledge_agent,bm25s-doc --ka-option key=value
    python benchmarks/quality.py --json figures.json
    python benchmarks/quality.py --systems knowledge_agent,knowledge_agent+rerank --reranker JSON
    python benchmarks/quality.py --backend postgresql    # + the same on a PostgreSQL database

Data sets are read in place from ../shared/datasets (or --datasets DIR, or
$KNOWLEDGE_AGENT_DATASETS). Quality figures are comparable across machines; ingest and query
times are informative only (compare ratios against the references, not absolute values).
knowledge_agent+minilm is the default hybrid search with all-MiniLM-L6-v2 embeddings (run in
numpy; the [minilm] extra and its weights) as a third ranking; it runs only when named.
knowledge_agent+rerank is the default search with rerank=True; its reranker is --reranker, a
configuration as KnowledgeAgentCore(reranker=...) takes it, e.g. '{"provider": "openai",
"base_url": "http://127.0.0.1:8911/v1", "model": "minilm"}' for benchmarks/rerank_server.py.
With --backend postgresql, knowledge_agent and knowledge_agent-item also run on a PostgreSQL
database (a new one per data set, on an embedded server started here or on the server of
--backend-url), named ``…@postgresql``, and each data set reports their top-1 agreement with
the local backend and the largest figure difference (benchmarks/backend_compare.py).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import platform
import shlex
import sqlite3
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: import the harness as the `benchmarks` package
    sys.path[0] = str(Path(__file__).resolve().parents[1])

try:
    import bm25s  # noqa: F401  (the reference systems need the `bench` extra)
    import Stemmer  # noqa: F401
except ImportError as exc:
    sys.exit(f"{exc}: install the bench extra first: pip install -e '.[bench]'")

from benchmarks.backend_compare import agreements, format_agreements, postgres_systems
from benchmarks.datasets import DATASET_NAMES, Dataset, default_datasets_dir, load_dataset
from benchmarks.evaluation import METRICS, evaluate
from benchmarks.package_system import (
    KnowledgeAgentSystem,
    SharedKnowledgeBase,
    check_reranker,
    load_core_class,
    parse_options,
)
from benchmarks.reference_figures import NOTES, PUBLISHED
from benchmarks.reference_systems import Bm25DocSystem, Bm25ParagraphSystem, Fts5System
from benchmarks.systems import Hit, System

REFERENCE_SYSTEMS = ("bm25s-doc", "bm25s-para", "fts5")
PACKAGE_SYSTEMS = ("knowledge_agent", "knowledge_agent-item")
# With WordLlama embeddings (the [embed] extra): the three rankings fused, and dense alone.
DENSE_SYSTEMS = ("knowledge_agent+dense", "knowledge_agent-dense")
# The default search with rerank=True, the reranker given by --reranker.
RERANK_SYSTEMS = ("knowledge_agent+rerank",)
# With all-MiniLM-L6-v2 embeddings (the [minilm] extra and its weights) fused in hybrid mode;
# run only when named: embedding a corpus takes minutes.
MINILM_SYSTEMS = ("knowledge_agent+minilm",)
SYSTEM_NAMES = REFERENCE_SYSTEMS + PACKAGE_SYSTEMS + DENSE_SYSTEMS + RERANK_SYSTEMS + MINILM_SYSTEMS
KA_SYSTEMS = PACKAGE_SYSTEMS + DENSE_SYSTEMS + RERANK_SYSTEMS + MINILM_SYSTEMS


@dataclass
class SystemResult:
    system: str
    figures: dict[str, float] = field(default_factory=dict)
    ingest_seconds: float = 0.0
    ingest_shared: bool = False
    query_ms: float = 0.0
    queries: int = 0
    error: str | None = None
    runs: dict[str, list[Hit]] = field(default_factory=dict, repr=False)  # query id → hits


def build_systems(
    names: list[str], core_class: type | None, ka_options: dict, reranker: dict | None = None
) -> list[System]:
    """Fresh systems for one data set (the two knowledge_agent levels and the reranked search
    share one ingestion, and so do the two dense systems)."""
    options = {**ka_options, "reranker": reranker} if reranker is not None else ka_options

    def base(embedder: str, wanted: tuple[str, ...]) -> SharedKnowledgeBase | None:
        if not core_class or not any(name in wanted for name in names):
            return None
        return SharedKnowledgeBase(core_class, {**ka_options, "embedder": {"provider": embedder}})

    shared = SharedKnowledgeBase(core_class, options) if core_class else None
    embedded = base("wordllama", DENSE_SYSTEMS)
    minilm = base("minilm", MINILM_SYSTEMS)
    factories: dict[str, Callable[[], System]] = {
        "bm25s-doc": Bm25DocSystem,
        "bm25s-para": Bm25ParagraphSystem,
        "fts5": Fts5System,
    }
    if shared is not None:
        factories["knowledge_agent"] = lambda: KnowledgeAgentSystem("knowledge_agent", shared)
        factories["knowledge_agent-item"] = lambda: KnowledgeAgentSystem(
            "knowledge_agent-item", shared, level="item"
        )
        if reranker is not None:
            factories["knowledge_agent+rerank"] = lambda: KnowledgeAgentSystem(
                "knowledge_agent+rerank", shared, rerank=True
            )
    if embedded is not None:
        factories["knowledge_agent+dense"] = lambda: KnowledgeAgentSystem(
            "knowledge_agent+dense", embedded
        )
        factories["knowledge_agent-dense"] = lambda: KnowledgeAgentSystem(
            "knowledge_agent-dense", embedded, mode="dense"
        )
    if minilm is not None:
        factories["knowledge_agent+minilm"] = lambda: KnowledgeAgentSystem(
            "knowledge_agent+minilm", minilm
        )
    return [factories[name]() for name in names if name in factories]


def run_system(system: System, dataset: Dataset) -> SystemResult:
    """Ingest the corpus, run every query, score the run."""
    depth, _ = METRICS[dataset.name]
    result = SystemResult(system.name, queries=len(dataset.queries))
    started = time.perf_counter()
    system.index(dataset.documents)
    result.ingest_seconds = getattr(system, "ingest_seconds", None) or (
        time.perf_counter() - started
    )
    result.ingest_shared = bool(getattr(system, "ingest_shared", False))
    runs: dict[str, list[Hit]] = {}
    started = time.perf_counter()
    for query in dataset.queries:
        runs[query.query_id] = system.search(query.text, depth)
    elapsed = time.perf_counter() - started
    result.query_ms = 1000 * elapsed / max(1, len(dataset.queries))
    result.figures = evaluate(dataset, runs)
    result.runs = runs
    return result


def run_dataset(dataset: Dataset, systems: list[System]) -> list[SystemResult]:
    results = []
    try:
        for system in systems:
            try:
                result = run_system(system, dataset)
            except Exception as exc:  # report it, keep measuring the others
                traceback.print_exc(file=sys.stderr)
                result = SystemResult(system.name, error=f"{type(exc).__name__}: {exc}")
            log(
                f"[{dataset.name}] {system.name}: ingest {result.ingest_seconds:.1f} s, "
                f"{result.queries} queries at {result.query_ms:.2f} ms"
                + (f" — FAILED {result.error}" if result.error else "")
            )
            results.append(result)
    finally:
        for system in systems:
            system.close()
    return results


def format_table(dataset: Dataset, results: list[SystemResult]) -> str:
    _, metrics = METRICS[dataset.name]
    labels = [m.label for m in metrics]
    header = ["system", *labels, "ingest s", "query ms"]
    rows = []
    for r in results:
        if r.error:
            rows.append([r.system, *(["error"] * len(labels)), "", ""])
            continue
        ingest = f"{r.ingest_seconds:.2f}" + ("*" if r.ingest_shared else "")
        rows.append(
            [
                r.system,
                *(f"{r.figures[label]:.3f}" for label in labels),
                ingest,
                f"{r.query_ms:.2f}",
            ]
        )
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        return "  ".join(
            cell.ljust(width) if i == 0 else cell.rjust(width)
            for i, (cell, width) in enumerate(zip(cells, widths, strict=True))
        )

    judged = sum(1 for q in dataset.queries if q.query_id in dataset.qrels)
    out = [
        f"== {dataset.name}: {len(dataset.documents):,} documents, {judged:,} queries",
        line(header),
        line(["-" * w for w in widths]),
        *(line(row) for row in rows),
    ]
    published = PUBLISHED.get(dataset.name, {})
    if published:
        parts = [
            f"{system} {label} {value:.3f}"
            for label, by_system in published.items()
            for system, value in by_system.items()
        ]
        out.append("README reference figures: " + ", ".join(parts))
    if dataset.name in NOTES:
        out.append("README also: " + NOTES[dataset.name])
    if any(r.ingest_shared for r in results):
        out.append("* index shared with the system above (one ingestion per data set)")
    for r in results:
        if r.error:
            out.append(f"{r.system} failed: {r.error}")
    return "\n".join(out)


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def split_names(value: str, allowed: tuple[str, ...], what: str) -> list[str]:
    names = [v.strip() for v in value.split(",") if v.strip()]
    unknown = [n for n in names if n not in allowed]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown {what}: {', '.join(unknown)} (choose from {', '.join(allowed)})"
        )
    return names


def parse_reranker(value: str) -> dict:
    try:
        config = json.loads(value)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not JSON: {exc}") from None
    if not isinstance(config, dict):
        raise argparse.ArgumentTypeError('a JSON object is expected, e.g. {"provider": …}')
    return config


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Retrieval quality of knowledge_agent against bm25s and SQLite FTS5."
    )
    parser.add_argument(
        "--datasets",
        type=Path,
        default=None,
        metavar="DIR",
        help="folder holding the data sets (default: $KNOWLEDGE_AGENT_DATASETS, else "
        "../shared/datasets from the project root)",
    )
    parser.add_argument(
        "--datasets-only",
        type=lambda v: split_names(v, DATASET_NAMES, "data set"),
        default=list(DATASET_NAMES),
        metavar="NAMES",
        help=f"comma-separated subset of {','.join(DATASET_NAMES)}",
    )
    parser.add_argument(
        "--systems",
        type=lambda v: split_names(v, SYSTEM_NAMES, "system"),
        default=None,
        metavar="NAMES",
        help=f"comma-separated subset of {','.join(SYSTEM_NAMES)} (default: all but "
        "knowledge_agent+minilm; knowledge_agent+rerank only with --reranker)",
    )
    parser.add_argument(
        "--limit-queries",
        type=int,
        default=None,
        metavar="N",
        help="run a deterministic sample of N queries per data set",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of --limit-queries sampling")
    parser.add_argument(
        "--ka-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="keyword argument for KnowledgeAgentCore(...), repeatable; VALUE parsed as JSON "
        "when it parses (e.g. --ka-option fusion='\"rrf\"' --ka-option keyword_weight=0.7)",
    )
    parser.add_argument(
        "--reranker",
        type=parse_reranker,
        default=None,
        metavar="JSON",
        help="reranker of knowledge_agent+rerank, as KnowledgeAgentCore(reranker=...) takes it, "
        'e.g. \'{"provider": "openai", "base_url": "http://127.0.0.1:8911/v1", "model": "m"}\'',
    )
    parser.add_argument(
        "--backend",
        choices=("local", "postgresql"),
        default="local",
        help="postgresql: also run knowledge_agent and knowledge_agent-item on a PostgreSQL "
        "database and compare them with the local backend (default: local only)",
    )
    parser.add_argument(
        "--backend-url",
        default=None,
        metavar="URL",
        help="with --backend postgresql: a server whose user may create databases (default: "
        "an embedded server started for the run)",
    )
    parser.add_argument("--json", type=Path, default=None, metavar="PATH", help="write figures")
    args = parser.parse_args(argv)
    if args.backend_url and args.backend != "postgresql":
        parser.error("--backend-url needs --backend postgresql")
    if args.systems is None and args.backend == "postgresql":
        args.systems = list(REFERENCE_SYSTEMS + PACKAGE_SYSTEMS)
    elif args.systems is None:
        args.systems = [
            name
            for name in SYSTEM_NAMES
            if (args.reranker or name not in RERANK_SYSTEMS) and name not in MINILM_SYSTEMS
        ]
    elif args.reranker is None and any(name in RERANK_SYSTEMS for name in args.systems):
        parser.error(
            "knowledge_agent+rerank needs --reranker JSON (a reranker configuration, "
            "e.g. one served by benchmarks/rerank_server.py)"
        )
    try:
        args.ka_options = parse_options(args.ka_option)
    except ValueError as exc:
        parser.error(str(exc))
    return args


def environment() -> dict[str, str]:
    import bm25s

    env = {
        "python": platform.python_version(),
        "bm25s": bm25s.__version__,
        "sqlite": sqlite3.sqlite_version,
        "machine": f"{platform.machine()}, {platform.system()}",
    }
    try:
        env["knowledge_agent"] = importlib.metadata.version("knowledge-agent")
    except importlib.metadata.PackageNotFoundError:
        env["knowledge_agent"] = "not installed"
    return env


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    root = args.datasets or default_datasets_dir()
    if not root.is_dir():
        print(f"data sets not found at {root} (use --datasets DIR)", file=sys.stderr)
        return 2

    core_class = None
    if any(name in KA_SYSTEMS for name in args.systems):
        try:
            core_class = load_core_class()
        except (ImportError, AttributeError) as exc:
            print(f"knowledge_agent systems skipped: KnowledgeAgentCore not importable ({exc})")

    if core_class is not None and any(name in RERANK_SYSTEMS for name in args.systems):
        try:
            check_reranker(args.reranker)
        except Exception as exc:  # a reranker that cannot answer would leave every order as is
            print(f"the reranker does not answer: {type(exc).__name__}: {exc}", file=sys.stderr)
            return 2

    server = None
    if args.backend == "postgresql":
        if core_class is None or not any(name in PACKAGE_SYSTEMS for name in args.systems):
            print("--backend postgresql compares knowledge_agent systems: none to run",
                  file=sys.stderr)  # fmt: skip
            return 2
        from benchmarks.pg_server import server_for

        server = server_for(args.backend_url)
    try:
        return measure(args, root, core_class, server)
    finally:
        if server is not None:
            server.stop()


def measure(args: argparse.Namespace, root: Path, core_class: type | None, server: Any) -> int:
    """Every data set of ``args``, printed and written; ``server`` gives a database per data
    set for the systems on the postgresql backend (None: the local backend only)."""
    started = time.perf_counter()
    env = environment()
    print("environment: " + ", ".join(f"{k} {v}" for k, v in env.items()))
    if args.ka_options:
        print(f"KnowledgeAgentCore options: {json.dumps(args.ka_options, ensure_ascii=False)}")
    if args.reranker and any(name in RERANK_SYSTEMS for name in args.systems):
        print(f"reranker: {json.dumps(args.reranker, ensure_ascii=False)}")
    report: dict = {
        "command": shlex.join(["python", "benchmarks/quality.py", *sys.argv[1:]]),
        "environment": env,
        "ka_options": args.ka_options,
        "reranker": args.reranker,
        "limit_queries": args.limit_queries,
        "seed": args.seed,
        "backend": args.backend,
        "datasets": {},
    }
    for name in args.datasets_only:
        dataset = load_dataset(name, root).sample_queries(args.limit_queries, args.seed)
        systems = build_systems(args.systems, core_class, args.ka_options, args.reranker)
        url = server.new_database() if server is not None else None
        if url is not None:
            assert core_class is not None  # checked by main
            systems += postgres_systems(args.systems, core_class, args.ka_options, url)
        try:
            results = run_dataset(dataset, systems)
        finally:
            if url is not None:
                server.drop_database(url)
        print()
        print(format_table(dataset, results), flush=True)
        compared = agreements(results)
        if compared:
            print(format_agreements(compared), flush=True)
        report["datasets"][name] = {
            "documents": len(dataset.documents),
            "queries": len(dataset.queries),
            "published": PUBLISHED.get(name, {}),
            "systems": {
                r.system: {
                    "figures": r.figures,
                    "ingest_seconds": r.ingest_seconds,
                    "ingest_shared": r.ingest_shared,
                    "query_ms": r.query_ms,
                    "error": r.error,
                }
                for r in results
            },
        }
        if compared:
            report["datasets"][name]["agreement"] = {a.system: a.to_dict() for a in compared}
    total = time.perf_counter() - started
    report["total_seconds"] = total
    print(f"\ntotal {total:.0f} s")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
