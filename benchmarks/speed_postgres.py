"""``benchmarks/speed.py --backend postgresql``: the same tree collected into a local data
folder and into a PostgreSQL database in one run, ingest MB/s and warm query latency of both
beside SQLite FTS5 and bm25s over the same chunks, and where the ingest time goes.

Where the time goes: the CPU seconds of this process (the collect's client side: extraction
in its workers, analysis, building rows), of the extraction workers (reaped children), and of
the PostgreSQL server's processes (inserts, index maintenance, commits; an embedded server
only), beside the wall time; with ``--profile-ingest N``, a cProfile of this process during the
database's ingest, its top N functions by own time and the share spent waiting on the server
(psycopg's calls) against the rest.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import resource
from pathlib import Path
from typing import Any

from benchmarks.pg_server import server_for
from benchmarks.speed_report import size_label

MODES = ("hybrid", "keyword", "semantic")
P95_GOAL = 2.0  # the database's p95 ÷ the local one's, at most
INGEST_GOAL = 1.0  # the database's ingest MB/s ÷ the local one's, at least


def _cpu() -> tuple[float, float]:
    """CPU seconds (user + system) of this process and of its reaped children."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


def ingest_with_cpu(
    core: Any, files: Path, server: Any, measure_ingest: Any, profile_top: int
) -> dict[str, Any]:
    """``measure_ingest(core, files)`` with the CPU seconds of this process, of its reaped
    children and of the server (None when unknown); a cProfile summary when ``profile_top``."""
    own0, children0 = _cpu()
    server0 = server.cpu_seconds() if server is not None else None
    profiler = cProfile.Profile() if profile_top else None
    if profiler is not None:
        os.register_at_fork(after_in_child=profiler.disable)  # not in the forked workers
        profiler.enable()
    try:
        figures = measure_ingest(core, files)
    finally:
        if profiler is not None:
            profiler.disable()
    own1, children1 = _cpu()
    server1 = server.cpu_seconds() if server is not None else None
    figures["cpu_s"] = {
        "client": round(own1 - own0, 2),
        "workers": round(children1 - children0, 2),
        "server": None if server0 is None or server1 is None else round(server1 - server0, 2),
    }
    if profiler is not None:
        figures["profile"] = profile_summary(profiler, profile_top)
    return figures


def profile_summary(profiler: cProfile.Profile, top: int) -> dict[str, Any]:
    """The profile's total, the seconds spent inside psycopg (sending rows, waiting for the
    server), in the package's analysis, the round trips to the server, and the top functions
    by own time (text)."""
    stats = pstats.Stats(profiler)
    raw: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    total = sum(entry[2] for entry in raw.values())  # own time of every function
    by_area = {"psycopg": 0.0, "analysis": 0.0, "postgres backend": 0.0, "other": 0.0}
    round_trips = 0
    for (filename, _, function), entry in raw.items():
        own = entry[2]
        if function == "wait" and filename.endswith("psycopg/connection.py"):
            round_trips += entry[1]  # every statement, fetch and commit waits on the server once
        if "psycopg" in filename:
            by_area["psycopg"] += own
        elif "knowledge_agent/analysis" in filename or "jieba" in filename:
            by_area["analysis"] += own
        elif "knowledge_agent/backends/postgres" in filename:
            by_area["postgres backend"] += own
        else:
            by_area["other"] += own
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(top)
    return {
        "total_s": round(total, 2),
        "own_seconds_by_area": {k: round(v, 2) for k, v in by_area.items()},
        "round_trips": round_trips,
        "top_by_own_time": text.getvalue(),
    }


def measure_backend(
    label: str,
    core: Any,
    files: Path,
    queries: list[str],
    args: argparse.Namespace,
    hooks: Any,
    server: Any = None,
) -> dict[str, Any]:
    """Ingest ``files`` into ``core`` and time its queries in every mode."""
    hooks.log(f"{label}: collecting the files")
    profile_top = args.profile_ingest if server is not None else 0
    ingest = ingest_with_cpu(core, files, server, hooks.measure_ingest, profile_top)
    hooks.log(f"  {ingest['seconds']:.1f} s, {ingest['mb_per_s']} MB/s; CPU s {ingest['cpu_s']}")
    status = core.status()
    hooks.log(
        f"  {status.chunks:,} chunks in {status.items:,} items; consistent {status.consistent}"
    )
    latency = hooks.measure_package_queries(core, queries, args.warmup)
    return {
        "ingest": ingest,
        "items": status.items,
        "chunks": status.chunks,
        "consistent": status.consistent,
        "latency": latency,
    }


def run(ws: Any, args: argparse.Namespace, hooks: Any) -> dict[str, Any]:
    """The tree, the local data folder, then the database, then the references over the
    local base's chunks. ``hooks``: speed.py's module (its corpus, ingest and timing code)."""
    from knowledge_agent import KnowledgeAgentCore

    manifest = hooks.prepare(ws, args)
    queries = hooks.load_queries(args.datasets or hooks.default_datasets_dir(), args.queries,
                                 args.seed)  # fmt: skip
    args.warmup = min(args.warmup, len(queries))
    result: dict[str, Any] = {"size": manifest["size"], "tree": manifest["tree"]}
    with KnowledgeAgentCore(ws.kb, workers=args.workers) as core:
        result["local"] = measure_backend("local", core, ws.files, queries, args, hooks)
        texts = hooks.read_chunk_texts(core.storage)
    server = server_for(args.backend_url)
    try:
        url = server.new_database()
        with KnowledgeAgentCore(backend=url, workers=args.workers) as core:
            result["postgresql"] = measure_backend(
                "postgresql", core, ws.files, queries, args, hooks, server
            )
        server.drop_database(url)
    finally:
        server.stop()
    hooks.log(f"reference engines over the same {len(texts.ids):,} chunks")
    with hooks.tempfile.TemporaryDirectory(prefix="ka-speed-fts5-") as tmp:
        result["references"] = hooks.measure_references(texts, queries, args.warmup, Path(tmp))
    result["queries"], result["warmup"] = len(queries), args.warmup
    return result


def _cell(value: float | None, digits: int) -> str:
    return "" if value is None else f"{value:,.{digits}f}"


def table(result: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The Markdown table of a run and its figures (with the goals met)."""
    local, pg, refs = result["local"], result["postgresql"], result["references"]
    megabytes = local["ingest"]["megabytes"]
    fts5, bm25 = refs["fts5"], refs["bm25s"]
    # label, local, postgresql, FTS5, bm25s, digits, goal ("ingest": ratio ≥, "p95": ratio ≤)
    rows: list[tuple[str, Any, Any, Any, Any, int, str]] = [
        ("chunks", local["chunks"], pg["chunks"], None, None, 0, ""),
        ("ingest, s", local["ingest"]["seconds"], pg["ingest"]["seconds"],
         fts5["index_s"], bm25["index_s"], 1, ""),
        ("ingest, MB/s", local["ingest"]["mb_per_s"], pg["ingest"]["mb_per_s"],
         megabytes / fts5["index_s"], megabytes / bm25["index_s"], 3, "ingest"),
    ]  # fmt: skip
    for mode in MODES:
        for stat in ("p50", "p95"):
            goal = "p95" if stat == "p95" and mode != "semantic" else ""
            rows.append((f"{mode} {stat}, ms", getattr(local["latency"][mode][0], stat),
                         getattr(pg["latency"][mode][0], stat), fts5["latency_ms"][stat],
                         bm25["latency_ms"][stat], 1, goal))  # fmt: skip
    goals = {"ingest": (f"≥ {INGEST_GOAL:g}× local", lambda r: r >= INGEST_GOAL),
             "p95": (f"≤ {P95_GOAL:g}× local", lambda r: r <= P95_GOAL)}  # fmt: skip
    figures: dict[str, Any] = {}
    lines = [
        "| figure | local | postgresql | postgresql ÷ local | FTS5 | bm25s | goal | met? |",
        "|---|---:|---:|---:|---:|---:|---|---|",
    ]
    for label, a, b, f, m, digits, goal in rows:
        ratio = b / a if a else None
        said, met = goals[goal][0] if goal else "", ""
        if goal and ratio is not None:
            passed = goals[goal][1](ratio)
            met = "yes" if passed else "**no**"
            figures[label] = {"ratio": round(ratio, 3), "met": passed}
        lines.append(f"| {label} | {_cell(a, digits)} | {_cell(b, digits)} | "
                     f"{_cell(ratio, 2)} | {_cell(f, digits)} | {_cell(m, digits)} | "
                     f"{said} | {met} |")  # fmt: skip
    cpu_lines = []
    for name in ("local", "postgresql"):
        ingest = result[name]["ingest"]
        cpu = ingest["cpu_s"]
        server = "unknown" if cpu["server"] is None else f"{cpu['server']:.1f}"
        cpu_lines.append(
            f"{name} ingest: {ingest['seconds']:.1f} s wall; CPU s: this process "
            f"{cpu['client']:.1f}, extraction workers {cpu['workers']:.1f}"
            + (f", server {server}" if name == "postgresql" else "")
        )
    profile = result["postgresql"]["ingest"].get("profile")
    if profile:
        areas = ", ".join(f"{k} {v:.1f}" for k, v in profile["own_seconds_by_area"].items())
        cpu_lines.append(
            f"cProfile of the postgresql ingest ({profile['total_s']:.1f} s), own seconds: "
            f"{areas}; {profile['round_trips']:,} round trips to the server"
        )
    text = "\n".join(
        [
            f"== {size_label(result['size'])} requested: {local['chunks']:,} chunks "
            f"({pg['chunks']:,} on postgresql); {result['queries']} queries, "
            f"{result['warmup']} warm-up",
            *lines,
            "",
            *cpu_lines,
        ]
    )
    return text, figures


def to_json(result: dict[str, Any]) -> dict[str, Any]:
    """``result`` with its latencies as plain dicts."""
    out = dict(result)
    for name in ("local", "postgresql"):
        data = dict(result[name])
        data["latency"] = {
            mode: {**latency.to_dict(), "empty_results": empty}
            for mode, (latency, empty) in data["latency"].items()
        }
        out[name] = data
    return out
