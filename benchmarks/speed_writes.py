"""The speed harness's small figures, independent of ``--size``: writing one text at a time,
a short-lived in-memory knowledge base, and start-up time.

- On disk: a fresh ``KnowledgeAgentCore(folder)``, 1,000 ``add_text`` calls one by one, one
  search, close. The figure is milliseconds per add over the adds + the search + the close,
  beside each add's own latency (p50, p95) and the search and close apart, so indexing that is
  deferred to the search or the close is still counted. The search looks for a token only the
  last text holds and must find it; the base is then opened again (timed, not counted in the
  figure) and must hold every text. Reference: SQLite FTS5 in a file, each insert committed.
- In memory: ``KnowledgeAgentCore()`` open + 20 adds + one search + close, run after run
  (median and p95), after one untimed run so imports are not counted. Reference: the same with
  FTS5 in ``sqlite3`` ``":memory:"``, the two taking turns.
- Start-up: ``knowledge-agent --version``, ``python -c "import knowledge_agent"`` and
  ``python -c pass`` (the interpreter alone) in new processes, median wall time.

The texts are real: tldr pages and squad-long paragraphs, alternating, each in a seeded random
order.
"""

from __future__ import annotations

import json
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from benchmarks.datasets import markdown_title, tldr_pages
from benchmarks.speed_measure import WriteCycle, elapsed_ms, startup_times
from benchmarks.speed_references import fts5_write_cycle
from benchmarks.speed_report import Row
from knowledge_agent import KnowledgeAgentCore

DISK_ADDS = 1_000
MEMORY_ADDS = 20
MEMORY_RUNS = 30
STARTUP_RUNS = 5
# Appended to the last text of a cycle: the search after the adds must find that text.
CHECK_TOKEN = "kawritecheckquokka"


class WriteText(NamedTuple):
    title: str
    content: str


def _log(message: str) -> None:
    print(f"  {message}", file=sys.stderr, flush=True)


def load_texts(datasets: Path, count: int, seed: int = 0) -> list[WriteText]:
    """``count`` texts, alternating tldr pages (English and Chinese) and squad-long paragraphs
    (blank-line separated, titled after their article)."""
    pages = [
        WriteText(markdown_title(text) or name, text)
        for name, data in tldr_pages(datasets / "tldr" / "tldr-pages.tar.gz")
        if (text := data.decode("utf-8")).strip()
    ]
    paragraphs = []
    with (datasets / "squad-long" / "corpus.jsonl").open(encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                row = json.loads(line)
                title = str(row.get("title") or row["_id"])
                parts = [p.strip() for p in str(row.get("text") or "").split("\n\n")]
                paragraphs += [
                    WriteText(f"{title} ({number})", part)
                    for number, part in enumerate(filter(None, parts), 1)
                ]
    pools = [pages, paragraphs]
    for name, pool in zip(("tldr", "squad-long"), pools, strict=True):
        pool.sort()
        random.Random(f"{seed}:writes:{name}").shuffle(pool)
    texts = [text for pair in zip(*pools, strict=False) for text in pair][:count]
    if len(texts) < count:
        raise SystemExit(f"{datasets}: {len(texts)} texts to add, {count} wanted")
    return texts


def with_check(texts: Sequence[WriteText]) -> tuple[list[WriteText], str]:
    """The texts with :data:`CHECK_TOKEN` appended to the last, and the query that must find
    it (the last title and the token)."""
    *rest, last = texts
    marked = WriteText(last.title, f"{last.content}\n\n{CHECK_TOKEN}")
    return [*rest, marked], f"{last.title} {CHECK_TOKEN}"


def package_cycle(data_dir: Path | None, texts: Sequence[WriteText], query: str) -> WriteCycle:
    """Open (``None``: in memory), ``add_text`` each text, one hybrid search, close."""
    started = time.perf_counter_ns()
    core = KnowledgeAgentCore(data_dir)
    open_ms = elapsed_ms(started)
    try:
        add_ms: list[float] = []
        last = ""
        for text in texts:
            started = time.perf_counter_ns()
            last = core.add_text(text.content, title=text.title).id
            add_ms.append(elapsed_ms(started))
        started = time.perf_counter_ns()
        results = core.search(query)
        search_ms = elapsed_ms(started)
    except BaseException:
        core.close()
        raise
    started = time.perf_counter_ns()
    core.close()
    close_ms = elapsed_ms(started)
    found = any(result.item.id == last for result in results)
    return WriteCycle(open_ms, tuple(add_ms), search_ms, close_ms, found)


def _require_found(cycle: WriteCycle, who: str) -> None:
    if not cycle.found_last:
        raise SystemExit(f"check failed: {who}: the search after the adds missed the last text")


def reopen(data_dir: Path, expected_items: int) -> float:
    """Open the closed base again, in milliseconds; it must hold every text with nothing left
    to index (cost a write-behind design leaves past ``close`` shows here)."""
    started = time.perf_counter_ns()
    core = KnowledgeAgentCore(data_dir)
    opened = elapsed_ms(started)
    with core:
        status = core.status()
    if status.items != expected_items or not status.consistent:
        raise SystemExit(
            f"check failed: reopened, {status.items} items of {expected_items}; "
            + "; ".join(status.problems)
        )
    return opened


def measure_disk(texts: Sequence[WriteText], log: Callable[[str], None]) -> dict[str, Any]:
    """The package and FTS5, each into a fresh folder."""
    marked, query = with_check(texts)
    with tempfile.TemporaryDirectory(prefix="ka-speed-writes-") as tmp:
        folder = Path(tmp)
        package = package_cycle(folder / "kb", marked, query)
        _require_found(package, "package on disk")
        reopen_ms = reopen(folder / "kb", len(marked))
        fts5 = fts5_write_cycle(str(folder / "fts5.sqlite3"), marked, query)
        _require_found(fts5, "FTS5 on disk")
    for name, cycle in (("package", package), ("FTS5", fts5)):
        add = cycle.add_latency()
        log(
            f"{name:<7} on disk: {cycle.work_ms / len(marked):.3f} ms/add "
            f"(add p50 {add['p50']:.2f} p95 {add['p95']:.2f} ms, search "
            f"{cycle.search_ms:.1f} ms, close {cycle.close_ms:.1f} ms)"
        )
    log(f"package reopened in {reopen_ms:.1f} ms")
    return {"package": package.to_dict(), "reopen_ms": round(reopen_ms, 3), "fts5": fts5.to_dict()}


def _summary(cycles: Sequence[WriteCycle]) -> dict[str, Any]:
    """Medians of each step over the runs, the p95 of the whole cycle, one add's p50."""

    def median(values: Sequence[float]) -> float:
        return round(statistics.median(values), 3)

    totals = [cycle.total_ms for cycle in cycles]
    adds = [ms for cycle in cycles for ms in cycle.add_ms]
    return {
        "total_ms": median(totals),
        "total_p95_ms": round(float(np.percentile(totals, 95)), 3),
        "open_ms": median([cycle.open_ms for cycle in cycles]),
        "adds_ms": median([cycle.adds_ms for cycle in cycles]),
        "add_p50_ms": median(adds),
        "search_ms": median([cycle.search_ms for cycle in cycles]),
        "close_ms": median([cycle.close_ms for cycle in cycles]),
        "runs_ms": [round(total, 3) for total in totals],
    }


def measure_memory(
    texts: Sequence[WriteText], runs: int, adds: int, log: Callable[[str], None]
) -> dict[str, Any]:
    """``runs`` in-memory cycles of ``adds`` texts each (a different slice every run), the
    package and FTS5 taking turns, after one untimed cycle of each."""
    slices = [
        with_check([texts[(run * adds + i) % len(texts)] for i in range(adds)])
        for run in range(runs + 1)
    ]
    package_cycle(None, *slices[0])
    fts5_write_cycle(":memory:", *slices[0])
    package: list[WriteCycle] = []
    fts5: list[WriteCycle] = []
    for marked, query in slices[1:]:
        package.append(package_cycle(None, marked, query))
        _require_found(package[-1], "package in memory")
        fts5.append(fts5_write_cycle(":memory:", marked, query))
        _require_found(fts5[-1], "FTS5 in memory")
    result: dict[str, Any] = {
        "runs": runs,
        "adds": adds,
        "package": _summary(package),
        "fts5": _summary(fts5),
    }
    for name in ("package", "fts5"):
        figures = result[name]
        log(
            f"{name:<7} in memory: {figures['total_ms']:.2f} ms median, "
            f"p95 {figures['total_p95_ms']:.2f} ms (open {figures['open_ms']:.2f}, adds "
            f"{figures['adds_ms']:.2f}, search {figures['search_ms']:.2f}, close "
            f"{figures['close_ms']:.2f})"
        )
    return result


def cli_command() -> list[str]:
    """The installed ``knowledge-agent`` script beside this interpreter (or on PATH); else
    the module run by this interpreter."""
    beside = Path(sys.executable).with_name("knowledge-agent")
    found = str(beside) if beside.is_file() else shutil.which("knowledge-agent")
    if found:
        return [found, "--version"]
    return [sys.executable, "-m", "knowledge_agent.cli", "--version"]


def measure_startup(runs: int, log: Callable[[str], None]) -> dict[str, Any]:
    """Median wall seconds of each command in a new process."""
    commands = {
        "cli_version": cli_command(),
        "import": [sys.executable, "-c", "import knowledge_agent"],
        "python": [sys.executable, "-c", "pass"],
    }
    times = startup_times(commands, runs)
    result: dict[str, Any] = {"runs": runs}
    for name, command in commands.items():
        result[name] = {
            "command": command,
            "median_s": round(statistics.median(times[name]), 4),
            "runs_s": [round(t, 4) for t in times[name]],
        }
        log(f"{name:<11} {result[name]['median_s']:.3f} s median of {runs}")
    return result


def measure_writes(
    datasets: Path,
    *,
    seed: int = 0,
    disk_adds: int = DISK_ADDS,
    memory_runs: int = MEMORY_RUNS,
    memory_adds: int = MEMORY_ADDS,
    startup_runs: int = STARTUP_RUNS,
    log: Callable[[str], None] = _log,
) -> dict[str, Any]:
    """Every write and start-up figure, as JSON-ready data. The in-memory runs come first:
    their untimed run also does the imports the on-disk adds would otherwise pay."""
    started = time.perf_counter()
    texts = load_texts(datasets, disk_adds, seed)
    sizes = [len(text.content.encode("utf-8")) for text in texts]
    median = statistics.median(sizes)
    log(f"{len(texts):,} texts, {sum(sizes) / 1e6:.2f} MB (median {median:,.0f} B)")
    result: dict[str, Any] = {
        "texts": {"count": len(texts), "bytes": sum(sizes), "median_bytes": median}
    }
    result["in_memory"] = measure_memory(texts, memory_runs, memory_adds, log)
    result["disk"] = measure_disk(texts, log)
    result["startup"] = measure_startup(startup_runs, log)
    result["seconds"] = round(time.perf_counter() - started, 1)
    return result


def write_rows(writes: dict[str, Any]) -> list[Row]:
    """The write and start-up figures as table rows, FTS5 beside where it has the figure."""
    disk, memory, startup = writes["disk"], writes["in_memory"], writes["startup"]
    package, fts5 = disk["package"], disk["fts5"]
    adds, runs = package["adds"], memory["runs"]
    mem, mem_fts5 = memory["package"], memory["fts5"]
    return [
        Row("writes_disk_per_add_ms", f"{adds:,} adds on disk, ms per add",
            package["per_add_ms"], 3, fts5["per_add_ms"],
            note="adds + search + close, amortised; FTS5: a commit per insert"),
        Row("writes_disk_add_p50_ms", "  one add_text, p50, ms",
            package["add_ms"]["p50"], 3, fts5["add_ms"]["p50"]),
        Row("writes_disk_add_p95_ms", "  one add_text, p95, ms",
            package["add_ms"]["p95"], 3, fts5["add_ms"]["p95"]),
        Row("writes_disk_add_max_ms", "  one add_text, max, ms",
            package["add_ms"]["max"], 1, fts5["add_ms"]["max"], note="a stall of one add"),
        Row("writes_disk_search_ms", "  the search after the adds, ms",
            package["search_ms"], 2, fts5["search_ms"]),
        Row("writes_disk_close_ms", "  close, ms", package["close_ms"], 2, fts5["close_ms"]),
        Row("writes_disk_open_ms", "  open a fresh folder, ms", package["open_ms"], 2,
            fts5["open_ms"], note="not in the figure"),
        Row("writes_disk_reopen_ms", "  open it again after, ms", disk["reopen_ms"], 2,
            note="not in the figure"),
        Row("writes_memory_ms", f"in memory: open + {memory['adds']} adds + search + close, ms",
            mem["total_ms"], 2, mem_fts5["total_ms"],
            note=f"median of {runs} runs; FTS5 in :memory:"),
        Row("writes_memory_p95_ms", "  p95 of the runs, ms",
            mem["total_p95_ms"], 2, mem_fts5["total_p95_ms"]),
        Row("writes_memory_open_ms", "  open, ms", mem["open_ms"], 2, mem_fts5["open_ms"]),
        Row("writes_memory_adds_ms", f"  {memory['adds']} adds, ms",
            mem["adds_ms"], 2, mem_fts5["adds_ms"]),
        Row("writes_memory_add_p50_ms", "  one add_text, p50, ms",
            mem["add_p50_ms"], 3, mem_fts5["add_p50_ms"]),
        Row("writes_memory_search_ms", "  search, ms", mem["search_ms"], 2, mem_fts5["search_ms"]),
        Row("writes_memory_close_ms", "  close, ms", mem["close_ms"], 2, mem_fts5["close_ms"]),
        Row("startup_cli_version_s", "knowledge-agent --version, wall, s",
            startup["cli_version"]["median_s"], 3,
            note=f"median of {startup['runs']} new processes"),
        Row("startup_import_s", "python -c 'import knowledge_agent', s",
            startup["import"]["median_s"], 3),
        Row("startup_python_s", "python -c pass, s", startup["python"]["median_s"], 3,
            note="the interpreter alone"),
    ]  # fmt: skip
