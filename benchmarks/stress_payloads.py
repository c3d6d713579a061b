"""Planted pickles: does any file under ``index/`` get unpickled when a data folder is opened?

A small base is built once. Then, one case at a time and on a fresh copy of the base, a file
under ``index/`` is tampered with so that unpickling it would create a marker file:

* ``replace``: every file (TOC, segments, write locks, manifests, state, ``.npz``) replaced by
  a bare pickle;
* ``toc-schema`` / ``toc-segments``: a Whoosh TOC rewritten with a valid header whose pickled
  schema (or segment list) is the payload, so it gets past the header checks;
* ``seg-append``: the payload appended to a compound segment (``.seg``); ``seg-redirect``:
  appended and the segment's directory offset pointed at it; ``seg-splice``: the pickled
  directory overwritten in place;
* ``npz-object``: an ``.npz`` rewritten with the same member names holding object arrays
  (numpy pickles those).

Each case is opened twice, on separate copies: ``knowledge-agent search`` and
``KnowledgeAgentCore(path).search(...)`` (in a child process). An execution is a marker file
that exists afterwards. The copy must still answer (the planted file was rebuilt from SQLite).
"""

from __future__ import annotations

import io
import os
import pickle
import re
import shutil
import struct
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.stress_checks import log, run_child, run_cli
from benchmarks.stress_corpus import token, write_corpus


class Payload:
    """Unpickling this runs ``touch MARKER``: the marker is the proof of execution."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Callable[..., Any], tuple[str]]:
        return os.system, (f"touch '{self.marker}'",)


def payload_bytes(marker: Path, protocol: int = 2) -> bytes:
    return pickle.dumps(Payload(marker), protocol=protocol)


# -- the tampering -------------------------------------------------------------------------------


def _varint(value: int) -> bytes:
    """Whoosh's ``write_varint``: 7 bits a byte, low bits first."""
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _split_toc(data: bytes) -> tuple[bytes, bytes, bytes, bytes]:
    """A Whoosh TOC as (header, pickled schema, generation + unused ints, pickled segments)."""
    from whoosh.filedb.structfile import StructFile

    stream = StructFile(io.BytesIO(data))
    for _ in range(3):
        stream.read_varint()  # int, long and float sizes
    if stream.read_int() != -12345:
        raise ValueError("not a Whoosh TOC")
    stream.read_int()  # format version
    for _ in range(3):
        stream.read_varint()  # release
    header_end = stream.tell()
    schema = stream.read_string()
    middle_start = stream.tell()
    stream.read_int()
    stream.read_int()
    middle_end = stream.tell()
    return data[:header_end], schema, data[middle_start:middle_end], data[middle_end:]


def toc_schema(data: bytes, payload: bytes) -> bytes:
    header, _, middle, segments = _split_toc(data)
    return header + _varint(len(payload)) + payload + middle + segments


def toc_segments(data: bytes, payload: bytes) -> bytes:
    header, schema, middle, _ = _split_toc(data)
    return header + _varint(len(schema)) + schema + middle + payload


def seg_append(data: bytes, payload: bytes) -> bytes:
    return data + payload


def seg_redirect(data: bytes, payload: bytes) -> bytes:
    """Whoosh's compound file starts with the directory's offset (``!q``) and length (``!i``)."""
    return struct.pack("!qi", len(data), len(payload)) + data[12:] + payload


def seg_splice(data: bytes, payload: bytes) -> bytes:
    (offset,) = struct.unpack("!q", data[:8])
    if not 12 <= offset < len(data):
        raise ValueError("no directory offset")
    return data[:offset] + payload


def npz_object(data: bytes, payload: bytes) -> bytes:
    """The same member names, each an object array holding the payload."""
    with zipfile.ZipFile(io.BytesIO(data)) as original:
        names = original.namelist()
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        for name in names:
            member = io.BytesIO()
            array = np.empty(1, dtype=object)
            array[0] = _Deferred(payload)
            np.save(member, array, allow_pickle=True)
            archive.writestr(name, member.getvalue())
    return out.getvalue()


class _Deferred:
    """Pickles as the given payload bytes' object without building it here."""

    def __init__(self, payload: bytes) -> None:
        self.payload = payload

    def __reduce__(self) -> tuple[Callable[..., Any], tuple[bytes]]:
        return pickle.loads, (self.payload,)


TAMPERINGS: dict[str, tuple[Callable[[str], bool], Callable[[bytes, bytes], bytes]]] = {
    "replace": (lambda name: True, lambda data, payload: payload),
    "toc-schema": (lambda name: name.endswith(".toc"), toc_schema),
    "toc-segments": (lambda name: name.endswith(".toc"), toc_segments),
    "seg-append": (lambda name: name.endswith(".seg"), seg_append),
    "seg-redirect": (lambda name: name.endswith(".seg"), seg_redirect),
    "seg-splice": (lambda name: name.endswith(".seg"), seg_splice),
    "npz-object": (lambda name: name.endswith(".npz"), npz_object),
}


# -- the run -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    file: str  # relative to index/
    tampering: str


def api_search(data_dir: str, query: str) -> dict[str, Any]:
    """In a child process: open, search, and check."""
    from knowledge_agent import KnowledgeAgentCore

    with KnowledgeAgentCore(data_dir) as core:
        results = core.search(query, limit=5, context_window=0)
        status = core.check()
        return {
            "sources": [r.item.source_uri for r in results],
            "consistent": status.consistent,
            "problems": list(status.problems),
        }


def _plant(base: Path, target: Path, case: Case, marker: Path) -> None:
    shutil.copytree(base, target)
    path = target / "index" / case.file
    original = path.read_bytes()
    _, tamper = TAMPERINGS[case.tampering]
    path.write_bytes(tamper(original, payload_bytes(marker)))


def _run_case(base: Path, work: Path, number: int, case: Case, query: str, expected: str) -> dict:
    outcome: dict[str, Any] = {"file": case.file, "tampering": case.tampering}
    for way in ("cli", "api"):
        target = work / f"case{number:03d}-{way}"
        marker = work / f"marker{number:03d}-{way}"
        try:
            _plant(base, target, case, marker)
        except (ValueError, zipfile.BadZipFile, EOFError, struct.error) as exc:
            outcome["skipped"] = f"cannot tamper: {exc}"
            shutil.rmtree(target, ignore_errors=True)
            return outcome
        if way == "cli":
            run = run_cli(
                ["--data-dir", str(target), "search", "--json", query], timeout=300, workdir=work
            )
            answered = run.returncode == 0 and expected in run.stdout.decode("utf-8", "replace")
            outcome["cli"] = {
                "exit": run.returncode,
                "answered": answered,
                "traceback": run.traceback,
                "stderr": run.stderr_tail(2),
            }
        else:
            answer = run_child(api_search, str(target), query, timeout=300)
            answered = answer.ok and expected in answer.value["sources"]
            outcome["api"] = {
                "answered": answered,
                "consistent": answer.ok and answer.value["consistent"],
                "error": "" if answer.ok else answer.describe(),
            }
        outcome[f"{way}_executed"] = marker.exists()
        marker.unlink(missing_ok=True)
        shutil.rmtree(target, ignore_errors=True)
    return outcome


def _role(name: str) -> str:
    """A file's part in the index, without its generation or random segment name."""
    base = re.sub(r"_[0-9a-z]{12,}(?=\.)", "_#", os.path.basename(name))
    return re.sub(r"\d+", "#", base)


def run_payloads(work: Path, seed: int, one_per_role: bool = False) -> dict[str, Any]:
    """Build the base, then every (file, tampering) case; figures and per-case outcomes.
    ``one_per_role`` tampers with one file of each role (one segment, one TOC, …) only."""
    work.mkdir(parents=True, exist_ok=True)
    corpus = write_corpus(work / "files", 40, seed)
    base = work / "base"
    build = run_cli(["--data-dir", str(base), "add", str(corpus.root)], timeout=600, workdir=work)
    if build.returncode != 0:
        raise RuntimeError(f"building the base failed: {build.stderr_tail()}")
    files = sorted(
        str(p.relative_to(base / "index")) for p in (base / "index").rglob("*") if p.is_file()
    )
    if one_per_role:
        firsts: dict[str, str] = {}
        for name in files:
            firsts.setdefault(_role(name), name)
        files = sorted(firsts.values())
    cases = [
        Case(name, tampering)
        for name in files
        for tampering, (applies, _) in TAMPERINGS.items()
        if applies(name)
    ]
    log(f"  {len(files)} files under index/, {len(cases)} cases, each through CLI and API")
    query, expected = token(7), str(corpus.paths[7])
    outcomes = []
    for number, case in enumerate(cases):
        outcome = _run_case(base, work, number, case, query, expected)
        outcomes.append(outcome)
        if outcome.get("cli_executed") or outcome.get("api_executed"):
            log(f"    EXECUTED: {case.file} ({case.tampering})")
    run = [o for o in outcomes if "skipped" not in o]
    executed = [o for o in run if o.get("cli_executed") or o.get("api_executed")]
    unanswered = [o for o in run if not (o["cli"]["answered"] and o["api"]["answered"])]
    return {
        "files": files,
        "cases": len(run),
        "cases_skipped": [o for o in outcomes if "skipped" in o],
        "executions": sum(bool(o.get("cli_executed")) + bool(o.get("api_executed")) for o in run),
        "cases_executed": executed,
        "cases_answered": len(run) - len(unanswered),
        "cases_unanswered": unanswered,
        "outcomes": outcomes,
    }
