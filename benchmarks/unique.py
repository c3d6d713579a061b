"""Distinct values in the package, per call site: ``np.unique`` against a sort (search.distinct).

    python benchmarks/unique.py                      # a 10K-chunk tree, collected and queried
    python benchmarks/unique.py --files DIR          # collect DIR instead
    python benchmarks/unique.py --size 100k --json unique.json

numpy 2.3+ answers a plain ``np.unique`` through a hash table (seconds for a million int64
keys) and ``return_index`` / ``return_inverse`` through an ``argsort``; the sort-based
functions of ``knowledge_agent.search.distinct`` give the same arrays. This harness records
the arrays every call site in the package passes to either, in a real ingest of the speed
harness's tree (benchmarks/speed_corpus.py) into a fresh on-disk base and ``--queries``
searches per mode after it, then times both ways on exactly those arrays, per site.
A table goes to stdout, progress to stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import timeit
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

if __package__ in (None, ""):  # run as a script: import the harness as the `benchmarks` package
    sys.path[0] = str(Path(__file__).resolve().parents[1])

from knowledge_agent.search import distinct as distinct_module

PACKAGE = Path(distinct_module.__file__).resolve().parents[1]
VARIANTS: dict[str, Callable[[np.ndarray], Any]] = {
    "plain": distinct_module.distinct,
    "counts": distinct_module.distinct_counts,
    "first": distinct_module.distinct_first,
    "inverse": distinct_module.distinct_inverse,
}
NP_OPTIONS = {
    "plain": {},
    "counts": {"return_counts": True},
    "first": {"return_index": True},
    "inverse": {"return_inverse": True},
}


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@dataclass
class Site:
    """The arrays one call site passed, with the way it asked (np.unique or search.distinct)."""

    where: str
    variant: str
    via: str
    phase: str
    arrays: list[np.ndarray] = field(default_factory=list)


class Recorder:
    """Wraps ``np.unique`` and the search.distinct functions; keeps a copy of every array a
    call from inside the package passes them."""

    def __init__(self) -> None:
        self.sites: dict[tuple[str, str, str, str], Site] = {}
        self.phase = "ingest"
        self._original_unique = np.unique
        self._originals = dict(VARIANTS)

    def install(self) -> None:
        """Before the package's modules are imported: they bind search.distinct's names."""
        np.unique = self._wrap(self._original_unique, None)  # type: ignore[assignment]
        for variant, fn in self._originals.items():
            setattr(distinct_module, fn.__name__, self._wrap(fn, variant))

    def uninstall(self) -> None:
        np.unique = self._original_unique  # type: ignore[assignment]
        for fn in self._originals.values():
            setattr(distinct_module, fn.__name__, fn)

    def _wrap(self, fn: Callable[..., Any], variant: str | None) -> Callable[..., Any]:
        def recorded(values: Any, *args: Any, **kwargs: Any) -> Any:
            frame = sys._getframe(1)
            path = Path(frame.f_code.co_filename).resolve()
            if path.is_relative_to(PACKAGE) and path.name != "distinct.py":
                name = variant or _np_variant(args, kwargs)
                if name is not None:
                    where = f"{path.relative_to(PACKAGE.parent)}:{frame.f_code.co_name}"
                    via = "search.distinct" if variant else "np.unique"
                    key = (where, name, via, self.phase)
                    site = self.sites.setdefault(key, Site(where, name, via, self.phase))
                    site.arrays.append(np.array(values, copy=True).ravel())
            return fn(values, *args, **kwargs)

        return recorded


def _np_variant(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
    """The one option of an ``np.unique`` call that search.distinct has (None: another)."""
    if args or set(kwargs) - {"return_index", "return_inverse", "return_counts"}:
        return None
    asked = [name for name, value in kwargs.items() if value]
    if not asked:
        return "plain"
    if len(asked) == 1:
        return {"return_index": "first", "return_inverse": "inverse", "return_counts": "counts"}[
            asked[0]
        ]
    return None


def best_ms(fn: Callable[[], Any], repeat: int) -> float:
    return min(timeit.repeat(fn, number=1, repeat=repeat)) * 1e3


def time_site(site: Site, repeat: int) -> dict[str, Any]:
    """Both ways over the site's arrays (each array's best of ``repeat``), and a check that
    they agree."""
    np_ms = sort_ms = 0.0
    options, helper = NP_OPTIONS[site.variant], VARIANTS[site.variant]
    for values in site.arrays:
        expected, got = np.unique(values, **options), helper(values)
        for a, b in zip(
            expected if isinstance(expected, tuple) else (expected,),
            got if isinstance(got, tuple) else (got,),
            strict=True,
        ):
            if not np.array_equal(np.ravel(a), b):
                raise SystemExit(f"{site.where}: search.distinct differs from np.unique")
        np_ms += best_ms(lambda values=values: np.unique(values, **options), repeat)
        sort_ms += best_ms(lambda values=values: helper(values), repeat)
    sizes = [values.size for values in site.arrays]
    return {
        "site": site.where,
        "phase": site.phase,
        "variant": site.variant,
        "called_via": site.via,
        "dtype": str(site.arrays[0].dtype),
        "calls": len(sizes),
        "elements": int(sum(sizes)),
        "largest": int(max(sizes)),
        "np_unique_ms": round(np_ms, 3),
        "sort_ms": round(sort_ms, 3),
    }


def collect(files: Path, queries: list[str], recorder: Recorder) -> dict[str, Any]:
    """A fresh on-disk base: ``files`` collected, then each query in each mode."""
    from benchmarks.speed import WALK_OPTIONS
    from knowledge_agent import KnowledgeAgentCore

    with (
        tempfile.TemporaryDirectory(prefix="ka-unique-") as tmp,
        KnowledgeAgentCore(Path(tmp) / "kb") as core,
    ):
        started = time.perf_counter()
        report = core.collect_knowledge(files, walk_options=WALK_OPTIONS)
        seconds = time.perf_counter() - started
        recorder.phase = "query"
        for mode in ("hybrid", "keyword", "semantic"):
            for query in queries:
                core.search(query, mode=mode)
    return {"seconds": round(seconds, 2), "chunks": report.chunks_added}


def render(rows: list[dict[str, Any]]) -> str:
    head = f"{'site':58} {'phase':6} {'variant':7} {'via':15} {'calls':>6} {'elements':>10} "
    head += f"{'largest':>9} {'np.unique ms':>12} {'sort ms':>9} {'×':>6}"
    lines = [head]
    for row in rows:
        ratio = row["np_unique_ms"] / row["sort_ms"] if row["sort_ms"] else float("nan")
        lines.append(
            f"{row['site'][-58:]:58} {row['phase']:6} {row['variant']:7} {row['called_via']:15} "
            f"{row['calls']:6,} {row['elements']:10,} {row['largest']:9,} "
            f"{row['np_unique_ms']:12.1f} {row['sort_ms']:9.1f} {ratio:6.1f}"
        )
    total_np = sum(row["np_unique_ms"] for row in rows)
    total_sort = sum(row["sort_ms"] for row in rows)
    lines.append(f"{'all sites':>58} {'':6} {'':7} {'':15} {'':6} {'':10} {'':9} "
                 f"{total_np:12.1f} {total_sort:9.1f}")  # fmt: skip
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--files", type=Path, default=None, metavar="DIR",
        help="collect this folder (default: build the speed harness's tree)",
    )  # fmt: skip
    parser.add_argument("--size", default="10k", help="chunks of the built tree (default 10k)")
    parser.add_argument(
        "--datasets", type=Path, default=None, metavar="DIR",
        help="the data sets folder (default: as benchmarks/speed.py)",
    )  # fmt: skip
    parser.add_argument("--queries", type=int, default=30, help="searches per mode (default 30)")
    parser.add_argument("--repeat", type=int, default=3, help="timings per array, best kept")
    parser.add_argument("--json", type=Path, default=None, metavar="FILE",
                        help="write the figures here")  # fmt: skip
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    recorder = Recorder()
    recorder.install()
    from benchmarks.datasets import default_datasets_dir
    from benchmarks.speed import parse_size
    from benchmarks.speed_corpus import build_tree, load_queries

    datasets = args.datasets or default_datasets_dir()
    queries = load_queries(datasets, args.queries, seed=0)
    load_start = [round(x, 2) for x in os.getloadavg()]
    with tempfile.TemporaryDirectory(prefix="ka-unique-files-") as tmp:
        files = args.files
        if files is None:
            files = Path(tmp)
            log(f"writing the speed harness's {args.size} tree")
            build_tree(datasets, files, parse_size(args.size), log=log)
        log(f"collecting {files}, then {len(queries)} searches per mode")
        ingest = collect(files, queries, recorder)
    recorder.uninstall()
    log(f"  ingest {ingest['seconds']} s, {ingest['chunks']:,} chunks; timing each site")
    rows = [time_site(site, args.repeat) for site in recorder.sites.values()]
    rows.sort(key=lambda row: (row["phase"], -row["np_unique_ms"]))
    figures = {
        "command": " ".join(["python", "benchmarks/unique.py", *(argv or sys.argv[1:])]),
        "numpy": np.__version__,
        "load_average": {"start": load_start, "end": [round(x, 2) for x in os.getloadavg()]},
        "ingest": ingest,
        "sites": rows,
    }
    print(f"numpy {np.__version__}; ingest {ingest['seconds']} s for {ingest['chunks']:,} chunks;")
    print(f"load average {load_start} at start, {figures['load_average']['end']} at end")
    print(render(rows))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
