"""Measuring helpers of the speed harness: latency percentiles, peak RSS, a cold open in a
new process, a timed write cycle, start-up times of new processes, and the machine the
figures come from."""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import resource
import shlex
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

_PROJECT_ROOT = Path(__file__).resolve().parents[1]

# Runs in the child: argv = [data_dir, query]; prints one JSON line of timings and peak RSS.
# The peak is VmHWM (this process image only): ru_maxrss survives fork + exec, so in a child of
# a big process it reports the parent's size.
_COLD_OPEN_CODE = """
import json, resource, sys, time
def peak_rss_mb():
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
started = time.perf_counter()
from knowledge_agent import KnowledgeAgentCore
imported = time.perf_counter()
core = KnowledgeAgentCore(sys.argv[1])
opened = time.perf_counter()
results = core.search(sys.argv[2])
searched = time.perf_counter()
core.close()
print(json.dumps({
    "import_s": imported - started,
    "open_s": opened - imported,
    "first_query_s": searched - opened,
    "total_s": searched - started,
    "results": len(results),
    "peak_rss_mb": peak_rss_mb(),
}))
"""


@dataclass(frozen=True)
class Latency:
    """Milliseconds per query over ``queries`` timed calls (after the warm-up)."""

    queries: int
    p50: float
    p95: float
    p99: float
    mean: float
    max: float

    def to_dict(self) -> dict[str, float]:
        return {key: round(value, 3) for key, value in asdict(self).items()}


def latency(samples_ms: Sequence[float]) -> Latency:
    """Percentiles (linear interpolation) of per-query times in milliseconds."""
    values = np.asarray(samples_ms, dtype=float)
    p50, p95, p99 = (float(x) for x in np.percentile(values, [50, 95, 99]))
    return Latency(len(values), p50, p95, p99, float(values.mean()), float(values.max()))


def time_queries(
    search: Callable[[str], object], queries: Sequence[str], warmup: int
) -> tuple[Latency, int]:
    """Run ``warmup`` queries untimed, then time each query; returns the latency and the
    number of queries that found nothing."""
    for query in queries[:warmup]:
        search(query)
    samples: list[float] = []
    empty = 0
    for query in queries:
        started = time.perf_counter_ns()
        found = search(query)
        samples.append((time.perf_counter_ns() - started) / 1e6)
        empty += not found
    return latency(samples), empty


def peak_rss_mb() -> float:
    """Peak resident set size of this process so far, in MB: ``VmHWM`` where /proc has it,
    else ``ru_maxrss`` (KB on Linux, bytes on macOS)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    scale = 1024 * 1024 if sys.platform == "darwin" else 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / scale


@dataclass(frozen=True)
class ColdOpen:
    """One new process opening the knowledge base and answering one query."""

    wall_s: float
    import_s: float
    open_s: float
    first_query_s: float
    total_s: float
    results: int
    peak_rss_mb: float

    def to_dict(self) -> dict[str, float]:
        return {key: round(value, 4) for key, value in asdict(self).items()}


def cold_open(data_dir: Path, query: str) -> ColdOpen:
    """``python -c``: import, open ``data_dir``, search ``query`` once; timed inside the child,
    and the whole process (interpreter start included) from outside."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(_PROJECT_ROOT), env.get("PYTHONPATH", "")) if p
    )
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", _COLD_OPEN_CODE, str(data_dir), query],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"the cold-open child failed:\n{done.stderr}")
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    return ColdOpen(wall_s=wall, **figures)


def median_cold_open(runs: Sequence[ColdOpen]) -> ColdOpen:
    """The run with the median in-child total time."""
    ordered = sorted(runs, key=lambda run: run.total_s)
    return ordered[(len(ordered) - 1) // 2]


@dataclass(frozen=True)
class WriteCycle:
    """Open, single writes one by one, one search, close: milliseconds of each step, and
    whether the search found the last write."""

    open_ms: float
    add_ms: tuple[float, ...]
    search_ms: float
    close_ms: float
    found_last: bool

    @property
    def adds_ms(self) -> float:
        return sum(self.add_ms)

    @property
    def work_ms(self) -> float:
        """The writes, the search and the close: indexing deferred by a write-behind design
        still lands in one of them."""
        return self.adds_ms + self.search_ms + self.close_ms

    @property
    def total_ms(self) -> float:
        return self.open_ms + self.work_ms

    def add_latency(self) -> dict[str, float]:
        """The distribution of one write's time, in milliseconds."""
        values = np.asarray(self.add_ms, dtype=float)
        p50, p95, p99 = (float(x) for x in np.percentile(values, [50, 95, 99]))
        stats = {"p50": p50, "p95": p95, "p99": p99, "mean": values.mean(), "max": values.max()}
        return {key: round(float(value), 4) for key, value in stats.items()}

    def to_dict(self) -> dict[str, object]:
        return {
            "adds": len(self.add_ms),
            "open_ms": round(self.open_ms, 3),
            "adds_ms": round(self.adds_ms, 3),
            "add_ms": self.add_latency(),
            "search_ms": round(self.search_ms, 3),
            "close_ms": round(self.close_ms, 3),
            "work_ms": round(self.work_ms, 3),
            "per_add_ms": round(self.work_ms / len(self.add_ms), 4),
            "total_ms": round(self.total_ms, 3),
            "found_last": self.found_last,
        }


def elapsed_ms(started_ns: int) -> float:
    """Milliseconds since ``time.perf_counter_ns()`` returned ``started_ns``."""
    return (time.perf_counter_ns() - started_ns) / 1e6


def startup_times(commands: Mapping[str, Sequence[str]], runs: int) -> dict[str, list[float]]:
    """Wall seconds of each command in a new process, ``runs`` times each, after one untimed
    round (so the first run does not pay for a cold page cache). The commands take turns, so
    a burst of load on a shared machine falls on all of them alike."""
    times: dict[str, list[float]] = {name: [] for name in commands}
    for round_number in range(runs + 1):
        for name, command in commands.items():
            started = time.perf_counter()
            done = subprocess.run(command, capture_output=True, text=True, check=False)
            wall = time.perf_counter() - started
            if done.returncode != 0:
                raise RuntimeError(f"{shlex.join(command)} failed:\n{done.stderr}")
            if round_number:
                times[name].append(wall)
    return times


def machine() -> dict[str, object]:
    """Where the figures come from: cores, Python, platform, library versions, load."""
    import bm25s

    try:
        version = importlib.metadata.version("knowledge-agent")
    except importlib.metadata.PackageNotFoundError:
        version = "not installed"
    return {
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "sqlite": sqlite3.sqlite_version,
        "bm25s": bm25s.__version__,
        "knowledge_agent": version,
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
    }
