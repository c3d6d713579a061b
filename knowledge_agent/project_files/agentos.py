"""001's ``.agentos/kb_config.json``, read as this project's settings.

=====================  ======================================================================
key                    becomes
=====================  ======================================================================
scan_paths             one ``sync`` scan of the project folder (the folder holding
                       ``.agentos/``) into the default knowledge base, whose include globs
                       are the patterns anchored at that folder (``docs/**/*.md`` →
                       ``/docs/**/*.md``); a pattern whose fixed part leaves the folder
                       (``../shared/*.md``, ``/srv/notes``) is a scan of its own, and only
                       once the file is trusted
exclude_patterns       that scan's exclude globs (gitignore-style, relative to the project
                       folder), added to the default excludes
chunk_size {min, max}  the chunk sizes: tokens, :data:`~.chunk_sizes.TOKEN_CHARS` characters
                       each (:func:`~.chunk_sizes.token_size_chunking`)
index_weights.heading  the keyword index counts a chunk's heading path twice its body text
                       (``HEADING_WEIGHT``, built into the index), 001's default of 2.0;
                       another weight is not used
index_weights          ``first_paragraph`` and ``code_blocks`` are not used: no index field
                       holds a first paragraph or code blocks apart
doc_type_weights       the document boost per doc type, over the built-in weights (001:
                       "覆盖默认值", they override the defaults one by one)
=====================  ======================================================================

Any other key is not used (and listed as such). A value of the wrong type, a ``min`` above
``max`` or a pattern that cannot be matched is a ``ConfigError`` naming the file and the key.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path, PurePosixPath
from typing import Any

from knowledge_agent.errors import ConfigError
from knowledge_agent.ingest.walker import WalkOptions
from knowledge_agent.project_files import values
from knowledge_agent.project_files.chunk_sizes import token_size_chunking
from knowledge_agent.project_files.model import NotUsed, Origin, ScanPath, SpecFile
from knowledge_agent.search.documents import HEADING_WEIGHT
from knowledge_agent.search.ranking.boosts import DEFAULT_DOC_TYPE_WEIGHTS

__all__ = ["FORMAT", "KB_CONFIG_FOLDER", "KB_CONFIG_NAME", "read_kb_config"]

KB_CONFIG_FOLDER = ".agentos"
KB_CONFIG_NAME = "kb_config.json"
FORMAT = KB_CONFIG_NAME

_KEYS = ("scan_paths", "exclude_patterns", "chunk_size", "index_weights", "doc_type_weights")
_GLOB_CHARS = re.compile(r"[*?\[]")
_UNUSED_WEIGHTS = {
    "first_paragraph": "no index field holds a document's first paragraph apart",
    "code_blocks": "no index field holds code blocks apart",
}


def read_kb_config(path: Path, data: bytes, *, trusted: bool) -> SpecFile:
    """What ``data``, the bytes of ``path`` (a ``.agentos/kb_config.json``), say;
    ``ConfigError`` naming the file and the key when they are not valid. Untrusted, a scan
    path leaving the project folder is left out and named in ``ignored``."""
    try:
        parsed = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: invalid JSON: not UTF-8 ({exc.reason})") from exc
    except ValueError as exc:
        raise ConfigError(f"{path}: invalid JSON: {exc}") from exc
    try:
        return _spec_file(path, values.table(parsed, "the file"), trusted)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from exc


def _spec_file(path: Path, parsed: Any, trusted: bool) -> SpecFile:
    root = path.parent.parent
    not_used = [
        NotUsed(path, str(key), "not a key of kb_config.json") for key in parsed if key not in _KEYS
    ]
    origins: dict[str, str] = {}
    chunking, chunk_origins = _chunk_size(parsed.get("chunk_size"))
    origins.update({f"chunking.{name}": key for name, key in chunk_origins.items()})
    if isinstance(parsed.get("chunk_size"), dict):
        not_used += [
            NotUsed(path, f"chunk_size.{key}", "not a key of chunk_size (min, max)")
            for key in parsed["chunk_size"]
            if key not in ("min", "max")
        ]
    if "index_weights" in parsed:
        weights = values.table(parsed["index_weights"], "index_weights")
        for key, value in weights.items():
            name = f"index_weights.{key}"
            weight = values.number(value, name)
            if key == "heading":
                if weight != HEADING_WEIGHT:
                    reason = (
                        f"a heading counts {HEADING_WEIGHT}x its body text here, built into "
                        "the index"
                    )
                    not_used.append(NotUsed(path, name, reason))
            else:
                reason = _UNUSED_WEIGHTS.get(key, "not a key of index_weights")
                not_used.append(NotUsed(path, name, reason))
    search: dict[str, Any] = {}
    if "doc_type_weights" in parsed:
        given = values.table(parsed["doc_type_weights"], "doc_type_weights")
        weights = {str(k): values.number(v, f"doc_type_weights.{k}") for k, v in given.items()}
        search["doc_type_weights"] = {**DEFAULT_DOC_TYPE_WEIGHTS, **weights}
        origins["search.doc_type_weights"] = "doc_type_weights"
    scan, ignored, scan_notes = _scans(path, root, parsed, trusted)
    return SpecFile(
        path=path,
        format=FORMAT,
        chunking=chunking,
        search=search,
        scan=scan,
        origins=origins,
        ignored=ignored,
        not_used=(*not_used, *scan_notes),
    )


def _chunk_size(value: object) -> tuple[dict[str, Any], dict[str, str]]:
    if value is None:
        return {}, {}
    sizes = values.table(value, "chunk_size")
    low = values.integer(sizes["min"], "chunk_size.min", 1) if "min" in sizes else None
    high = values.integer(sizes["max"], "chunk_size.max", 1) if "max" in sizes else None
    if low is not None and high is not None and low > high:
        raise ConfigError(f"chunk_size.min ({low}) must not exceed chunk_size.max ({high})")
    mapping = token_size_chunking(low, high)
    return mapping.settings, mapping.origins


def _scans(
    path: Path, root: Path, parsed: Any, trusted: bool
) -> tuple[tuple[ScanPath, ...], tuple[str, ...], list[NotUsed]]:
    """The scans ``scan_paths`` asks for, what was left out untrusted, and notes."""
    patterns = values.strings(parsed.get("scan_paths", []), "scan_paths")
    exclude = values.strings(parsed.get("exclude_patterns", []), "exclude_patterns")
    notes = []
    if exclude and not patterns:
        notes.append(NotUsed(path, "exclude_patterns", "no scan_paths to apply them to"))
    here: list[str] = []
    whole = False
    outside: list[ScanPath] = []
    ignored: list[str] = []
    for number, pattern in enumerate(patterns, start=1):
        key = f"scan_paths[{number}]"
        if not pattern.strip():
            raise ConfigError(f"{key} must be a non-empty glob, got {pattern!r}")
        base, rest = _split_glob(pattern)
        folder = Path(os.path.abspath(root / os.path.expanduser(base)))
        if values.inside(folder, root):
            relative = PurePosixPath(Path(os.path.relpath(folder, root)).as_posix())
            anchored = relative / rest if rest else relative
            if str(anchored) == ".":
                whole = True
            else:
                here.append(f"/{anchored}")
        elif trusted:
            include = (f"/{rest}",) if rest else ()
            outside.append(ScanPath(folder, "default", include, (), Origin(path, key)))
        else:
            ignored.append(f"scan_paths {pattern!r}")
    scans = []
    if here or whole:
        include = () if whole else tuple(dict.fromkeys(here))
        try:
            WalkOptions(include=include, exclude=exclude)
        except ConfigError as exc:
            raise ConfigError(f"scan_paths or exclude_patterns: {exc}") from exc
        scans.append(ScanPath(root, "default", include, exclude, Origin(path, "scan_paths")))
    return (*scans, *outside), tuple(ignored), notes


def _split_glob(pattern: str) -> tuple[str, str]:
    """``pattern`` as its fixed leading folders and the glob below them:
    ``docs/**/*.md`` → (``docs``, ``**/*.md``); ``README.md`` → (``README.md``, ``""``)."""
    parts = pattern.replace("\\", "/").split("/")
    fixed = []
    for part in parts:
        if _GLOB_CHARS.search(part):
            break
        fixed.append(part)
    rest = "/".join(parts[len(fixed) :])
    base = "/".join(fixed)
    if not base:
        base = "/" if pattern.startswith("/") else "."
    return base, rest
