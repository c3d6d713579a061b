"""What a settings file says, in this project's terms: the scan paths, where each setting
came from, and what a file said that is not used."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["NotUsed", "Origin", "ScanPath", "SpecFile"]


@dataclass(frozen=True)
class Origin:
    """The file that set a setting and the key it used there (its own spelling:
    ``chunk_size.max`` in a ``kb_config.json``, ``chunking.max_chunk_size`` in a
    ``.knowledge-agent.toml``)."""

    file: Path
    key: str


@dataclass(frozen=True)
class NotUsed:
    """A key a file gives that has no effect here, and why."""

    file: Path
    key: str
    reason: str


@dataclass(frozen=True)
class ScanPath:
    """A folder or file that ``sync`` collects: where, into which kb, with which globs.

    ``origin`` names the file and key that asked for it (not part of equality).
    """

    path: Path
    kb: str = "default"
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    origin: Origin | None = field(default=None, compare=False)


@dataclass(frozen=True)
class SpecFile:
    """What one settings file of another tool's format gives, already in this project's
    settings: ``chunking`` and ``search`` hold fields of ``ChunkConfig`` and
    ``SearchConfig``, ``embeddings`` / ``rerank`` provider tables.

    ``origins`` maps each setting it gives (``chunking.max_chunk_size``, ``embeddings`` …) to
    the key it came from; ``ignored`` names, in the file's own keys, what an untrusted file
    asked for that leaves its folder and was left out.
    """

    path: Path
    format: str
    chunking: Mapping[str, Any] = field(default_factory=dict)
    search: Mapping[str, Any] = field(default_factory=dict)
    scan: tuple[ScanPath, ...] = ()
    embeddings: Mapping[str, Any] | None = None
    rerank: Mapping[str, Any] | None = None
    origins: Mapping[str, str] = field(default_factory=dict)
    ignored: tuple[str, ...] = ()
    not_used: tuple[NotUsed, ...] = ()
