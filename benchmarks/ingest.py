"""Folder ingest of the tldr archive through collect_knowledge: full, re-run, one edit, one delete.

    python benchmarks/ingest.py                  # tldr, worker count chosen by the package
    python benchmarks/ingest.py --workers 1 --json ingest.json
    python benchmarks/ingest.py --backend postgresql   # also into a PostgreSQL database

The archive (8,960 markdown pages) is unpacked into a temporary folder and collected into a
fresh on-disk knowledge base (and, with ``--backend postgresql``, then into a new database of
an embedded server, or of ``--backend-url``'s). Each step checks the counts it must produce:
a no-change re-run processes 0 files, an edited page exactly 1, a deleted page removes
exactly 1.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: import the harness as the `benchmarks` package
    sys.path[0] = str(Path(__file__).resolve().parents[1])

from benchmarks.datasets import default_datasets_dir, tldr_pages
from knowledge_agent import KnowledgeAgentCore
from knowledge_agent.ingest import CollectReport, WalkOptions


def unpack(archive: Path, target: Path) -> tuple[int, int]:
    """Extract the markdown pages; returns (files, bytes)."""
    files = size = 0
    for name, data in tldr_pages(archive):
        path = target / "tldr" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        files += 1
        size += len(data)
    return files, size


def timed(step: str, run) -> tuple[CollectReport, float]:
    started = time.perf_counter()
    report = run()
    seconds = time.perf_counter() - started
    print(
        f"  {step:<22} {seconds:8.2f} s  processed {report.processed:>5}  unchanged "
        f"{report.unchanged:>5}  removed {report.removed}  failed {len(report.failed)}",
        file=sys.stderr,
    )
    return report, seconds


def check(condition: bool, message: str) -> None:
    if not condition:
        raise SystemExit(f"check failed: {message}")


def steps(core: KnowledgeAgentCore, folder: Path, files: int, size: int) -> dict[str, Any]:
    """A full ingest of ``folder``, a re-run, one page edited, one deleted: their figures.
    Leaves the folder edited (the caller unpacks it again for another run)."""
    options = WalkOptions(include_hidden=True)  # tldr has pages named `..md`
    full, full_s = timed(
        "full ingest", lambda: core.collect_knowledge(folder, walk_options=options)
    )
    check(full.processed == files and not full.failed, "every page processed")
    rerun, rerun_s = timed(
        "no-change re-run", lambda: core.collect_knowledge(folder, walk_options=options)
    )
    check(rerun.processed == 0 and rerun.unchanged == files, "re-run processes 0")

    page = sorted(folder.rglob("*.md"))[100]
    page.write_text(page.read_text("utf-8") + "\n- Quokka mode:\n\n`quokka`\n", "utf-8")
    stat = page.stat()
    os.utime(page, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    edit, edit_s = timed(
        "one page edited", lambda: core.collect_knowledge(folder, walk_options=options)
    )
    check(edit.processed == 1, "an edit processes exactly 1")
    check(core.search("quokka mode")[0].item.source_uri == str(page), "edit searchable")

    page.unlink()
    delete, delete_s = timed(
        "one page deleted", lambda: core.collect_knowledge(folder, walk_options=options)
    )
    check(delete.removed == 1 and delete.processed == 0, "a delete removes exactly 1")
    return {
        "chunks": core.storage.count_chunks(),
        "full_s": round(full_s, 2),
        "files_per_s": round(files / full_s, 1),
        "mb_per_s": round(size / 1e6 / full_s, 3),
        "chunks_per_s": round(full.chunks_added / full_s, 1),
        "rerun_s": round(rerun_s, 2),
        "edit_s": round(edit_s, 2),
        "delete_s": round(delete_s, 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--datasets", type=Path, default=None, help="the datasets folder")
    parser.add_argument("--workers", type=int, default=None, help="extraction processes")
    parser.add_argument(
        "--backend",
        choices=("local", "postgresql"),
        default="local",
        help="postgresql: the local data folder, then a PostgreSQL database",
    )
    parser.add_argument(
        "--backend-url",
        default=None,
        help="with --backend postgresql: a server whose user may create databases "
        "(default: an embedded server started for the run)",
    )
    parser.add_argument("--json", type=Path, default=None, help="write the figures here")
    args = parser.parse_args(argv)

    archive = (args.datasets or default_datasets_dir()) / "tldr" / "tldr-pages.tar.gz"
    runs: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="ka-ingest-") as tmp:
        folder = Path(tmp) / "pages"
        files, size = unpack(archive, folder)
        print(f"tldr: {files} pages, {size / 1e6:.2f} MB", file=sys.stderr)
        print("local data folder", file=sys.stderr)
        with KnowledgeAgentCore(Path(tmp) / "kb", workers=args.workers) as core:
            runs["local"] = steps(core, folder, files, size)
        if args.backend == "postgresql":
            from benchmarks.pg_server import server_for

            shutil.rmtree(folder)
            unpack(archive, folder)  # the same pages again: the local run edited one
            server = server_for(args.backend_url)
            try:
                url = server.new_database()
                print("postgresql", file=sys.stderr)
                with KnowledgeAgentCore(backend=url, workers=args.workers) as core:
                    runs["postgresql"] = steps(core, folder, files, size)
                server.drop_database(url)
            finally:
                server.stop()

    figures: dict[str, Any] = {
        "files": files,
        "megabytes": round(size / 1e6, 3),
        "workers": args.workers or min(4, os.cpu_count() or 1),
        **runs["local"],
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "python": platform.python_version(),
    }
    if "postgresql" in runs:
        figures["postgresql"] = runs["postgresql"]
    print()
    names = list(runs)
    print("| figure | " + " | ".join(names) + " |")
    print("|---|" + "---:|" * len(names))
    for name, value in figures.items():
        if name in runs["local"]:
            print(f"| {name} | " + " | ".join(str(runs[run][name]) for run in names) + " |")
        elif name != "postgresql":
            print(f"| {name} | {value} |" + " |" * (len(names) - 1))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
