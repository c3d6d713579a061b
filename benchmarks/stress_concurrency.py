"""Writers and readers on one data folder at the same time, each a process of its own.

A writer loops ``add_text`` (with an id it chose, so a write that raised can still be looked
up), ``collect_knowledge`` of a new folder of three files, and ``delete_knowledge_item`` of one
of its own earlier texts; every write carries a unique token and is logged when it returns or
raises. A reader loops ``search`` for tokens — of the base files (always present) and of
writes (present, deleted or not yet made) — and looks every hit up with ``get_item``; readers
either keep one core open or open a new one per query. Each process logs one JSON line per
operation to a file of its own; the parent joins them (killing any that outlive the time
limit) and then checks, in a child process, that every write that committed is in SQLite and
in both indexes.

A hit whose item is missing counts as a failure only when that item was never deleted, or
its deletion had returned before the search began: a deletion that overlaps the search can
legitimately leave a hit that is gone by the time ``get_item`` asks.
"""

from __future__ import annotations

import json
import multiprocessing
import random
import time
import traceback
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

from benchmarks.stress_checks import (
    ChildResult,
    examples,
    item_found,
    log,
    open_core,
    run_child,
    run_cli,
    target_args,
)
from benchmarks.stress_corpus import TextMaker, token, write_corpus
from benchmarks.stress_postgres import is_url, rows_whole

TOKENS_PER_WRITER = 100_000  # writer w's tokens are twr(w * this + n)
MAX_OPS = 100_000  # a bound on every loop, far above what the time limit allows
MODES = ("hybrid", "keyword", "semantic")


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:500]


@contextmanager
def _log_file(path: str) -> Iterator[TextIO]:
    with open(path, "a", encoding="utf-8", buffering=1) as handle:  # line-buffered: survives kill
        yield handle


def _write_line(handle: TextIO, record: dict[str, Any]) -> None:
    handle.write(json.dumps(record) + "\n")


# -- the processes -------------------------------------------------------------------------------


def writer_main(
    data_dir: str, log_path: str, folders: str, writer: int, deadline: float, seed: int
) -> None:
    """Write until ``deadline`` (epoch seconds); one log line per write."""
    rng = random.Random(seed)
    maker = TextMaker(seed)
    counter = writer * TOKENS_PER_WRITER
    texts: list[str] = []  # own add_text items that exist, candidates for deletion
    with _log_file(log_path) as out:
        started = time.time()
        try:
            core = open_core(data_dir)
        except Exception as exc:
            _write_line(
                out,
                {
                    "op": "open",
                    "t0": started,
                    "t1": time.time(),
                    "ok": False,
                    "error": _error(exc),
                    "trace": traceback.format_exc()[-2000:],
                },
            )
            return
        try:
            for number in range(MAX_OPS):
                if time.time() >= deadline:
                    break
                # A fixed rotation, so even a short run deletes; which item is random.
                kind = ("add_text", "collect", "add_text", "delete")[number % 4]
                record: dict[str, Any] = {"writer": writer, "n": number, "t0": time.time()}
                try:
                    if kind == "delete" and texts:
                        item_id = texts.pop(rng.randrange(len(texts)))
                        record.update(op="delete", id=item_id)
                        record["existed"] = core.delete_knowledge_item(item_id)
                    elif kind != "collect":
                        planted = token(counter, "twr")
                        counter += 1
                        item_id = str(uuid.uuid4())
                        record.update(
                            op="add_text",
                            id=item_id,
                            token=planted,
                            uri=f"stress://writer{writer}/{number}",
                        )
                        core.add_text(
                            maker.document(f"Write {number}", planted, 600),
                            title=f"Write {number}",
                            source_uri=record["uri"],
                            item_id=item_id,
                        )
                        texts.append(item_id)
                    else:
                        folder = Path(folders) / f"writer{writer}" / f"batch{number:05d}"
                        folder.mkdir(parents=True)
                        files = {}
                        for index in range(3):
                            planted = token(counter, "twr")
                            counter += 1
                            path = folder / f"file{index}.md"
                            path.write_text(maker.document(f"File {index}", planted, 500))
                            files[str(path)] = planted
                        record.update(op="collect", files=files)
                        report = core.collect_knowledge(folder)
                        record["ids"] = list(report.item_ids)
                        if report.failed:  # reported, not raised: a failed write all the same
                            record["error"] = f"report.failed: {report.failed}"[:500]
                    record["ok"] = "error" not in record
                except Exception as exc:
                    record.update(
                        ok=False,
                        raised=True,
                        error=_error(exc),
                        trace=traceback.format_exc()[-2000:],
                    )
                record["t1"] = time.time()
                _write_line(out, record)
                time.sleep(rng.uniform(0, 0.05))  # a pause, so readers get the CPU too
        finally:
            try:
                core.close()
            except Exception as exc:
                _write_line(
                    out,
                    {
                        "op": "close",
                        "t0": time.time(),
                        "t1": time.time(),
                        "ok": False,
                        "error": _error(exc),
                    },
                )


def reader_main(
    data_dir: str,
    log_path: str,
    reader: int,
    reopen: bool,
    deadline: float,
    base_tokens: dict[str, str],
    writers: int,
    seed: int,
) -> None:
    """Search until ``deadline``; one log line per query. ``base_tokens`` is {token: path} of
    files that are never removed: a keyword or hybrid search for one must return its file."""
    rng = random.Random(seed)
    planted_base = sorted(base_tokens)
    core: Any = None
    with _log_file(log_path) as out:
        try:
            for number in range(MAX_OPS):
                if time.time() >= deadline:
                    break
                if rng.random() < 0.7:
                    planted = rng.choice(planted_base)
                else:  # a write's token: made, deleted, or not yet made
                    base = rng.randrange(max(1, writers)) * TOKENS_PER_WRITER
                    planted = token(base + rng.randrange(400), "twr")
                mode = rng.choice(MODES)
                record: dict[str, Any] = {
                    "reader": reader,
                    "reopen": reopen,
                    "n": number,
                    "mode": mode,
                    "token": planted,
                    "t0": time.time(),
                }
                try:
                    if core is None:
                        core = open_core(data_dir)
                    results = core.search(planted, mode=mode, limit=10, context_window=1)
                    record["hits"] = len(results)
                    record["missing"] = [
                        r.item.id for r in results if core.get_item(r.item.id) is None
                    ]
                    expected = base_tokens.get(planted)
                    if expected is not None and mode != "semantic":
                        record["missed"] = all(r.item.source_uri != expected for r in results)
                    record["ok"] = True
                except Exception as exc:
                    record.update(ok=False, error=_error(exc), trace=traceback.format_exc()[-2000:])
                if reopen and core is not None:
                    try:
                        core.close()
                    except Exception as exc:
                        record.update(ok=False, error=_error(exc))
                    core = None
                record["t1"] = time.time()
                _write_line(out, record)
        finally:
            if core is not None:
                core.close()


# -- after the run -------------------------------------------------------------------------------


def verify_writes(data_dir: str, writes: list[dict[str, Any]]) -> dict[str, Any]:
    """In a child process: which writes committed (are in SQLite), which of those are missing
    from an index, which raised although they committed."""
    missing_sqlite: list[str] = []  # returned, not deleted, not stored
    missing_index: list[str] = []  # committed, not findable in one of the indexes
    raised_after_commit: list[str] = []
    deleted_but_stored: list[str] = []
    committed = below_top = 0
    core = open_core(data_dir)
    try:
        status = core.check()
        # On a database, also the tables themselves: every row with the rows it needs.
        problems = [*status.problems, *(rows_whole(data_dir) if is_url(data_dir) else [])]
        # Deleted: by a delete that returned, or by one that raised after it committed.
        deleted = {
            w["id"]
            for w in writes
            if w["op"] == "delete" and (w["ok"] or core.get_item(w["id"]) is None)
        }

        def judge(write: dict[str, Any], item: Any, planted: str, label: str) -> None:
            nonlocal committed, below_top
            if item is None:
                if write["ok"]:
                    missing_sqlite.append(label)
                return
            committed += 1
            if write.get("raised"):
                raised_after_commit.append(f"{label}: {write['error']}")
            for mode in ("keyword", "semantic"):
                found, scoped = item_found(core, item, planted, mode)
                below_top += scoped
                if not found:
                    missing_index.append(f"{label} ({mode})")

        for write in writes:
            if write["op"] == "add_text" and write["id"] not in deleted:
                item = core.get_item(write["id"])
                judge(write, item, write["token"], f"add_text {write['id']} {write['token']}")
            elif write["op"] == "collect":
                for path, planted in write["files"].items():
                    items = core.items_at(path)
                    item = items[0] if items else None
                    judge(write, item, planted, f"collect {path} {planted}")
            elif write["op"] == "delete":
                stored = core.get_item(write["id"]) is not None
                if write["ok"] and stored:
                    deleted_but_stored.append(write["id"])
                elif write.get("raised") and not stored:
                    raised_after_commit.append(f"delete {write['id']}: {write['error']}")
        return {
            "consistent": status.consistent and not problems,
            "problems": problems,
            "items": status.items,
            "committed_items_checked": committed,
            "semantic_below_top": below_top,
            "missing_sqlite": missing_sqlite,
            "missing_index": missing_index,
            "raised_after_commit": raised_after_commit,
            "deleted_but_stored": deleted_but_stored,
        }
    finally:
        core.close()


def _read_log(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    records = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a line cut short by a kill
    return records


def _hits_to_missing(
    reads: list[dict[str, Any]], writes: list[dict[str, Any]]
) -> tuple[list[str], int]:
    """Hits to items missing from SQLite that no deletion explains, and the number a
    concurrent deletion explains."""
    deleted_at = {w["id"]: w["t1"] for w in writes if w["op"] == "delete"}
    failures, raced = [], 0
    for read in reads:
        for item_id in read.get("missing", []):
            when = deleted_at.get(item_id)
            if when is not None and when >= read["t0"]:
                raced += 1
            else:
                failures.append(f"{item_id} for {read['token']} ({read['mode']})")
    return failures, raced


def run_concurrency(
    work: Path,
    *,
    writers: int,
    readers_reopen: int,
    readers_keep: int,
    seconds: float,
    files: int,
    seed: int,
    target: str | None = None,
) -> dict[str, Any]:
    """Build a base of ``files`` files, run the processes for ``seconds``, then check. The
    base is a data folder in ``work``, or the empty database ``target`` (a URL)."""
    work.mkdir(parents=True, exist_ok=True)
    corpus = write_corpus(work / "files", files, seed)
    data_dir = target or str(work / "kb")
    build = run_cli([*target_args(data_dir), "add", str(corpus.root)], timeout=600, workdir=work)
    if build.returncode != 0:
        raise RuntimeError(f"building the base failed: {build.stderr_tail()}")
    base_tokens = {planted: str(path) for path, planted in corpus.tokens().items()}
    context = multiprocessing.get_context("spawn")
    deadline = time.time() + seconds
    processes: list[tuple[str, Any, Path]] = []
    for writer in range(writers):
        log_path = work / f"writer{writer}.jsonl"
        args = (
            str(data_dir),
            str(log_path),
            str(work / "folders"),
            writer,
            deadline,
            seed * 100 + writer,
        )
        processes.append(("writer", context.Process(target=writer_main, args=args), log_path))
    for reader in range(readers_reopen + readers_keep):
        log_path = work / f"reader{reader}.jsonl"
        reopen = reader < readers_reopen
        args = (
            str(data_dir),
            str(log_path),
            reader,
            reopen,
            deadline,
            base_tokens,
            writers,
            seed * 100 + 50 + reader,
        )
        processes.append(("reader", context.Process(target=reader_main, args=args), log_path))
    for _, process, _ in processes:
        process.start()
    log(f"  {writers} writers, {readers_reopen + readers_keep} readers for {seconds:g} s")
    hung = {"writer": 0, "reader": 0}
    for role, process, _ in processes:
        process.join(max(1.0, deadline - time.time()) + 120)
        if process.is_alive():
            hung[role] += 1
            process.kill()
            process.join(10)
    writes = [r for role, _, path in processes if role == "writer" for r in _read_log(path)]
    reads = [r for role, _, path in processes if role == "reader" for r in _read_log(path)]
    crashed = {
        role: sum(1 for r, p, _ in processes if r == role and p.exitcode not in (0, None))
        for role in ("writer", "reader")
    }
    log(f"  {len(writes)} writes, {len(reads)} reads; checking every committed write")
    answer: ChildResult = run_child(
        verify_writes, str(data_dir), [w for w in writes if w.get("op") != "open"], timeout=900
    )
    return _figures(writes, reads, hung, crashed, answer)


def _figures(
    writes: list[dict[str, Any]],
    reads: list[dict[str, Any]],
    hung: dict[str, int],
    crashed: dict[str, int],
    answer: ChildResult,
) -> dict[str, Any]:
    failed_writes = [w for w in writes if not w["ok"]]
    failed_reads = [r for r in reads if not r["ok"]]
    missing_hits, raced = _hits_to_missing(reads, writes)
    latencies = sorted(w["t1"] - w["t0"] for w in writes if w.get("op") in ("add_text", "collect"))
    check: dict[str, Any] = answer.value if answer.ok else {"error": answer.describe()}
    counts = {k: len(v) for k, v in check.items() if isinstance(v, list) and k != "problems"}

    def errors(records: list[dict[str, Any]]) -> dict[str, int]:
        kinds: dict[str, int] = {}
        for record in records:
            kind = record["error"].split(":")[0]
            kinds[kind] = kinds.get(kind, 0) + 1
        return kinds

    return {
        "writes": len(writes),
        "writes_by_op": {
            op: sum(w["op"] == op for w in writes)
            for op in ("add_text", "collect", "delete", "open", "close")
        },
        "failed_writes": len(failed_writes) + hung["writer"] + crashed["writer"],
        "failed_write_kinds": errors(failed_writes),
        "failed_write_examples": examples(
            [{k: w.get(k) for k in ("op", "error", "trace")} for w in failed_writes]
        ),
        "reads": len(reads),
        "reads_reopening": sum(1 for r in reads if r["reopen"]),
        "failed_reads": len(failed_reads) + hung["reader"] + crashed["reader"],
        "failed_read_kinds": errors(failed_reads),
        "failed_read_examples": examples(
            [{k: r.get(k) for k in ("mode", "token", "error", "trace")} for r in failed_reads]
        ),
        "hits_to_missing_items": len(missing_hits),
        "hits_to_missing_examples": examples(missing_hits),
        "hits_to_items_deleted_meanwhile": raced,
        "base_items_missed": sum(1 for r in reads if r.get("missed")),
        "processes_hung": hung,
        "processes_crashed": crashed,
        "write_seconds_p50": round(latencies[len(latencies) // 2], 3) if latencies else None,
        "write_seconds_max": round(latencies[-1], 3) if latencies else None,
        "after": {
            k: ({"count": len(v), "examples": examples(v)} if isinstance(v, list) else v)
            for k, v in check.items()
        },
        "committed_missing": (
            counts.get("missing_sqlite", 0)
            + counts.get("missing_index", 0)
            + counts.get("deleted_but_stored", 0)
            if answer.ok
            else None
        ),
        "raised_after_commit": counts.get("raised_after_commit", 0) if answer.ok else None,
    }
