"""002's ``config.toml`` and its ``knowledge/<kb>/`` folders, read as this project's settings.

A ``config.toml`` is 002's when it has a ``[knowledge]``, ``[models.embedding]``,
``[models.rerank]`` or ``[embedding]`` table (:func:`is_knowledge_toml`); its other tables
belong to the program it configures and are not read.

==============================  ================================================================
key                             becomes
==============================  ================================================================
[models.embedding]              an ``[embeddings]`` provider ``"openai"`` (an OpenAI-compatible
(or [embedding])                ``/embeddings`` service): ``api_url`` → ``base_url``,
                                ``model_name`` → ``model`` (both required), ``api_key`` (sent
                                as the bearer token; without it ``$OPENAI_API_KEY``),
                                ``queue_interval_seconds`` → ``min_interval``, ``dimensions``
                                (0: the model's), ``query_instruction`` / ``document_instruction``
                                → ``query_prefix`` / ``document_prefix``
[models.rerank] (or [rerank])   a ``[rerank]`` provider ``"openai"`` (``/rerank``), the same
                                keys; ``query_instruction`` → ``query_prefix`` (put before the
                                query the reranker reads)
[knowledge] base_dir            the folder of knowledge bases (default ``knowledge``, relative to
                                the file): each folder ``<base_dir>/<kb>/`` is a ``sync`` scan
                                into the knowledge base ``<kb>`` of its ``texts/`` (the
                                documents) and ``intro.md`` (the knowledge base's description);
                                ``chroma/`` and ``.manifest.json`` are not read
[knowledge] embed_batch_size    the embeddings ``batch_size``
[knowledge] default_top_k       ``[search] default_top_k``: the results of ``search`` without
                                ``-n`` and of ``knowledge_semantic_search`` without ``top_k``
[knowledge] rerank_top_k        ``[search] rerank_top_k``: the passages a rerank keeps
[knowledge] enable_rerank       ``[search] enable_rerank``: whether knowledge_semantic_search
                                reranks when the call does not say
[knowledge] chunk_size,         the ``lines`` strategy (:func:`~.chunk_sizes.line_window_chunking`)
chunk_overlap
[knowledge] enabled, auto_scan, not used: knowledge-agent reads the knowledge bases whenever it
auto_embed, scan_interval       runs and collects on ``sync`` and ``watch``
==============================  ================================================================

Untrusted, the file gives no provider (each names a network endpoint, and maybe a secret) and
no knowledge-base folder outside its own folder: those are named in ``ignored``.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from knowledge_agent.errors import ConfigError
from knowledge_agent.models.knowledge_item import KB_NAME
from knowledge_agent.project_files import values
from knowledge_agent.project_files.chunk_sizes import line_window_chunking
from knowledge_agent.project_files.model import NotUsed, Origin, ScanPath, SpecFile

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

__all__ = [
    "DEFAULT_BASE_DIR",
    "FORMAT",
    "KB_EXCLUDE",
    "KNOWLEDGE_TOML_NAME",
    "is_knowledge_toml",
    "read_knowledge_toml",
]

KNOWLEDGE_TOML_NAME = "config.toml"
FORMAT = KNOWLEDGE_TOML_NAME
DEFAULT_BASE_DIR = "knowledge"
KB_EXCLUDE = ("/*", "!/texts/", "!/intro.md")
"""A knowledge-base folder's excludes: everything at its top but ``texts/`` and ``intro.md``."""

_MARKER = re.compile(
    r"^[ \t]*\[[ \t]*(knowledge|models|models\.embedding|models\.rerank|embedding)[ \t]*\]",
    re.MULTILINE,
)

_EMBEDDING_KEYS = {
    "api_url": "base_url",
    "api_key": "api_key",
    "model_name": "model",
    "queue_interval_seconds": "min_interval",
    "dimensions": "dimensions",
    "query_instruction": "query_prefix",
    "document_instruction": "document_prefix",
}
_RERANK_KEYS = {
    "api_url": "base_url",
    "api_key": "api_key",
    "model_name": "model",
    "queue_interval_seconds": "min_interval",
    "query_instruction": "query_prefix",
}
_LEAVING = ("api_url", "api_key")
_NOT_USED = (
    "knowledge-agent reads the knowledge bases whenever it runs; it collects on sync and watch"
)
_KNOWLEDGE_KEYS = {
    "enabled": _NOT_USED,
    "auto_scan": _NOT_USED,
    "auto_embed": _NOT_USED,
    "scan_interval": _NOT_USED,
    "base_dir": "",
    "embed_batch_size": "",
    "chunk_size": "",
    "chunk_overlap": "",
    "default_top_k": "",
    "rerank_top_k": "",
    "enable_rerank": "",
}


def is_knowledge_toml(text: str) -> bool:
    """Whether the text of a ``config.toml`` has one of 002's tables."""
    return _MARKER.search(text) is not None


def read_knowledge_toml(path: Path, data: bytes, *, trusted: bool) -> SpecFile:
    """What ``data``, the bytes of ``path`` (002's ``config.toml``), say; ``ConfigError``
    naming the file and the key when they are not valid."""
    try:
        parsed = tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: not UTF-8 ({exc.reason})") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from exc
    try:
        return _Reader(path, parsed, trusted).spec_file()
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from exc


class _Reader:
    """One pass over a parsed file, collecting settings, origins, notes and refusals."""

    def __init__(self, path: Path, parsed: Mapping[str, Any], trusted: bool):
        self.path = path
        self.parsed = parsed
        self.trusted = trusted
        self.origins: dict[str, str] = {}
        self.not_used: list[NotUsed] = []
        self.ignored: list[str] = []
        # Each provider table read: its key prefix and what the file gave.
        self.given: dict[str, tuple[str, Mapping[str, Any]]] = {}

    def note(self, key: str, reason: str) -> None:
        self.not_used.append(NotUsed(self.path, key, reason))

    def spec_file(self) -> SpecFile:
        knowledge = values.table(self.parsed.get("knowledge", {}), "knowledge")
        for key in knowledge:
            if key not in _KNOWLEDGE_KEYS:
                self.note(f"knowledge.{key}", "not a key of [knowledge]")
            elif _KNOWLEDGE_KEYS[key]:
                self.note(f"knowledge.{key}", _KNOWLEDGE_KEYS[key])
        embeddings = self.provider("embedding", _EMBEDDING_KEYS)
        if "embed_batch_size" in knowledge:
            size = values.integer(knowledge["embed_batch_size"], "knowledge.embed_batch_size", 1)
            if embeddings is not None:
                embeddings["batch_size"] = size
                self.origins["embeddings.batch_size"] = "knowledge.embed_batch_size"
            else:
                self.note("knowledge.embed_batch_size", "no [models.embedding] to batch for")
        rerank = self.provider("rerank", _RERANK_KEYS)
        return SpecFile(
            path=self.path,
            format=FORMAT,
            chunking=self.chunking(knowledge),
            search=self.search(knowledge),
            scan=self.scans(knowledge),
            embeddings=embeddings if self.allowed(embeddings, "embedding") else None,
            rerank=rerank if self.allowed(rerank, "rerank") else None,
            origins=self.origins,
            ignored=tuple(self.ignored),
            not_used=tuple(self.not_used),
        )

    def provider(self, name: str, keys: Mapping[str, str]) -> dict[str, Any] | None:
        """``[models.<name>]`` (or ``[<name>]``) as a provider table, checked."""
        models = values.table(self.parsed.get("models", {}), "models")
        if name in models and name in self.parsed:
            raise ConfigError(f"give [models.{name}] or [{name}], not both")
        prefix = f"models.{name}" if name in models else name
        given = models.get(name, self.parsed.get(name))
        if given is None:
            return None
        given = values.table(given, prefix)
        for required in ("api_url", "model_name"):
            if required not in given:
                raise ConfigError(f"{prefix}.{required} is required")
        table: dict[str, Any] = {"provider": "openai"}
        for key, value in given.items():
            if key not in keys:
                self.note(f"{prefix}.{key}", f"not a key of [{prefix}]")
                continue
            where = f"{prefix}.{key}"
            if key == "queue_interval_seconds":
                table[keys[key]] = values.number(value, where)
            elif key == "dimensions":
                if values.integer(value, where, 0):  # 002: 0 means the model's own
                    table[keys[key]] = value
            elif key.endswith("_instruction"):
                if values.string(value, where, empty=True):
                    table[keys[key]] = value
            else:
                table[keys[key]] = values.string(value, where)
        self.origins[_SETTING[name]] = f"[{prefix}]"
        self.given[name] = (prefix, given)
        return table

    def allowed(self, table: Mapping[str, Any] | None, name: str) -> bool:
        """Whether a provider table applies: always once trusted, never before (it names a
        network endpoint, maybe a secret)."""
        if table is None or self.trusted:
            return table is not None
        prefix, given = self.given[name]
        leaving = ", ".join(key for key in _LEAVING if key in given)
        self.ignored.append(f"[{prefix}] ({leaving})")
        setting = _SETTING[name]
        for key in [key for key in self.origins if key.split(".")[0] == setting]:
            del self.origins[key]
        return False

    def chunking(self, knowledge: Mapping[str, Any]) -> dict[str, Any]:
        lines = knowledge.get("chunk_size")
        overlap = knowledge.get("chunk_overlap")
        if lines is not None:
            lines = values.integer(lines, "knowledge.chunk_size", 1)
        if overlap is not None:
            overlap = values.integer(overlap, "knowledge.chunk_overlap", 0)
            if lines is not None and overlap >= lines:
                raise ConfigError(
                    f"knowledge.chunk_overlap ({overlap}) must be below "
                    f"knowledge.chunk_size ({lines})"
                )
        mapping = line_window_chunking(
            lines, overlap, keys=("knowledge.chunk_size", "knowledge.chunk_overlap")
        )
        self.origins.update({f"chunking.{name}": key for name, key in mapping.origins.items()})
        for key, reason in mapping.not_used.items():
            self.note(key, reason)
        return mapping.settings

    def search(self, knowledge: Mapping[str, Any]) -> dict[str, Any]:
        search: dict[str, Any] = {}
        for key in ("default_top_k", "rerank_top_k"):
            if key in knowledge:
                search[key] = values.integer(knowledge[key], f"knowledge.{key}", 1)
        if "enable_rerank" in knowledge:
            search["enable_rerank"] = values.boolean(
                knowledge["enable_rerank"], "knowledge.enable_rerank"
            )
        self.origins.update({f"search.{key}": f"knowledge.{key}" for key in search})
        return search

    def scans(self, knowledge: Mapping[str, Any]) -> tuple[ScanPath, ...]:
        """A scan of each knowledge-base folder under ``base_dir``, sorted by name."""
        given = "base_dir" in knowledge
        name = values.string(knowledge.get("base_dir", DEFAULT_BASE_DIR), "knowledge.base_dir")
        folder = self.path.parent
        base = Path(os.path.abspath(folder / os.path.expanduser(name)))
        if not values.inside(base, folder) and not self.trusted:
            self.ignored.append(f"knowledge.base_dir {name!r}")
            return ()
        try:
            with os.scandir(base) as listing:
                entries = sorted(listing, key=lambda entry: entry.name)
        except FileNotFoundError:
            if given:
                self.note("knowledge.base_dir", f"no folder {base}")
            return ()
        except OSError as exc:
            raise ConfigError(f"knowledge.base_dir: cannot list {base}: {exc.strerror}") from exc
        scans = []
        key = "knowledge.base_dir" if given else "knowledge.base_dir (default)"
        for entry in entries:
            if entry.name.startswith(".") or not entry.is_dir():
                continue
            kb = Path(entry.path)
            if not KB_NAME.fullmatch(entry.name):
                self.note(
                    f"{name}/{entry.name}", "not a knowledge-base name: letters, digits, _ . -"
                )
            elif not values.inside(kb, folder) and not self.trusted:
                self.ignored.append(f"{name}/{entry.name} (a link leaving the folder)")
            else:
                scans.append(ScanPath(kb, entry.name, (), KB_EXCLUDE, Origin(self.path, key)))
        return tuple(scans)


_SETTING = {"embedding": "embeddings", "rerank": "rerank"}
