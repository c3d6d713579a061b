"""Bad files beside good ones: ``knowledge-agent add --json`` of a folder of ten good Markdown
files and one bad file, one folder (and one fresh data folder) per kind of bad file.

Every good file must become an item found by its token. The bad file is handled when the
report lists it (``failed`` or ``skipped``) with its path and a reason, or when it was indexed
with its text intact (its planted token is in the stored text and found by a keyword
search): decoding a UTF-16 file without a BOM correctly is as good as refusing it. Indexed
with the token lost (mojibake) and not reported is silent damage; absent and not reported is a
silent drop.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from benchmarks.stress_checks import log, run_child, run_cli
from benchmarks.stress_corpus import BAD_KINDS, token, write_bad_case

GOOD_FILES = 10


def check_case(data_dir: str, goods: list[str], bad_path: str, planted: str) -> dict[str, Any]:
    """In a child process: which good files are found by their token, and what became of the
    bad one (looked up with ``items_at``, which knows how undecodable names are stored)."""
    from knowledge_agent import KnowledgeAgentCore

    with KnowledgeAgentCore(data_dir) as core:
        missing = []
        for number, path in enumerate(goods):
            results = core.search(token(number), mode="keyword", limit=5, context_window=0)
            if all(r.item.source_uri != path for r in results):
                missing.append(path)
        stored = core.items_at(bad_path)
        intact = bool(stored) and planted in stored[0].content
        ids = {item.id for item in stored}
        found = any(
            r.item.id in ids
            for r in core.search(planted, mode="keyword", limit=5, context_window=0)
        )
        return {
            "goods_missing": missing,
            "bad_stored": bool(stored),
            "bad_intact": intact,
            "bad_found": found,
            "consistent": core.check().consistent,
        }


def _reported(report: dict[str, Any], bad_path: str) -> dict[str, str] | None:
    name = os.path.basename(bad_path)
    for section in ("failed", "skipped"):
        for issue in report.get(section, []):
            path = str(issue.get("path", ""))
            if path == bad_path or os.path.basename(path) == name:
                return {"section": section, "path": path, "reason": str(issue.get("reason", ""))}
    return None


def run_case(work: Path, kind: str, seed: int, html_megabytes: int) -> dict[str, Any]:
    folder = work / kind / "files"
    data_dir = work / kind / "kb"
    goods, bad = write_bad_case(folder, kind, GOOD_FILES, seed, html_megabytes)
    bad_path = os.fsdecode(bad.path)
    run = run_cli(
        ["--data-dir", str(data_dir), "add", "--json", str(folder)], timeout=900, workdir=work
    )
    outcome: dict[str, Any] = {
        "kind": kind,
        "bad_file": bad_path.encode("utf-8", "backslashreplace").decode(),
        "bad_bytes": os.path.getsize(bad.path),
        "exit": run.returncode,
        "seconds": round(run.seconds, 2),
        "traceback": run.traceback,
    }
    try:
        report = json.loads(run.stdout.decode("utf-8", "surrogateescape"))
    except (json.JSONDecodeError, UnicodeDecodeError):
        report = {}
        outcome["stderr"] = run.stderr_tail(4)
    reported = _reported(report, bad_path)
    outcome["reported"] = reported
    answer = run_child(
        check_case, str(data_dir), [str(p) for p in goods], bad_path, bad.planted, timeout=600
    )
    if not answer.ok:
        outcome.update(
            check=answer.describe(), goods_indexed=0, handled=False, verdict="check failed"
        )
        return outcome
    check = answer.value
    outcome["goods_indexed"] = GOOD_FILES - len(check["goods_missing"])
    outcome["consistent"] = check["consistent"]
    intact = check["bad_intact"] and check["bad_found"]
    with_reason = reported is not None and bool(reported["reason"].strip())
    if with_reason:
        outcome["verdict"] = f"reported ({reported['section']}): {reported['reason'][:160]}"
    elif intact:
        outcome["verdict"] = "indexed with its text intact"
    elif check["bad_stored"]:
        outcome["verdict"] = "indexed with its text damaged, not reported"
    else:
        outcome["verdict"] = (
            "dropped without a report"
            if run.returncode == 0
            else (f"add failed (exit {run.returncode})")
        )
    outcome["handled"] = (with_reason or intact) and not run.traceback and run.returncode == 0
    return outcome


def run_bad_inputs(work: Path, seed: int, html_megabytes: int = 20) -> dict[str, Any]:
    work.mkdir(parents=True, exist_ok=True)
    outcomes = []
    for kind in BAD_KINDS:
        outcome = run_case(work, kind, seed, html_megabytes)
        outcomes.append(outcome)
        log(
            f"    {kind} ({outcome['bad_bytes'] / 1e6:.1f} MB): {outcome['goods_indexed']}/"
            f"{GOOD_FILES} good files, {outcome['verdict']} ({outcome['seconds']} s)"
        )
    return {
        "good_files": GOOD_FILES * len(outcomes),
        "good_indexed": sum(o["goods_indexed"] for o in outcomes),
        "bad_files": len(outcomes),
        "bad_handled": sum(o["handled"] for o in outcomes),
        "cases": outcomes,
    }
