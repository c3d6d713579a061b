"""How the chunk settings of other tools' files become ``[chunking]`` settings.

One function per kind of setting, each returning the ``[chunking]`` keys it sets (fields of
:class:`~knowledge_agent.chunking.ChunkConfig`), the file key each came from, and the file
keys it cannot honour with the reason; the readers of ``kb_config.json`` and ``config.toml``
call them and nothing else decides chunk sizes.

- 001's ``chunk_size = {min, max}`` counts tokens; chunk sizes here are characters. A token
  is taken as :data:`TOKEN_CHARS` characters, the estimate the MCP answer budget uses for
  text that is not CJK, so ``{min: 300, max: 800}`` cuts chunks of 1,200 to 3,200
  characters at headings and paragraphs, as 001's chunker does.
- 002's ``chunk_size`` / ``chunk_overlap`` count lines of a sliding window over the
  non-empty lines: :func:`line_window_chunking`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["TOKEN_CHARS", "ChunkMapping", "line_window_chunking", "token_size_chunking"]

TOKEN_CHARS = 4
"""Characters per token when a file counts chunk sizes in tokens."""


@dataclass(frozen=True)
class ChunkMapping:
    """``[chunking]`` keys with their values, the file key each came from, and the file keys
    that have no effect (with the reason)."""

    settings: dict[str, Any] = field(default_factory=dict)
    origins: dict[str, str] = field(default_factory=dict)
    not_used: dict[str, str] = field(default_factory=dict)


def token_size_chunking(
    min_tokens: int | None, max_tokens: int | None, *, key: str = "chunk_size"
) -> ChunkMapping:
    """001's ``chunk_size {min, max}`` (tokens): the minimum and maximum chunk size in
    characters. Either may be None (not given)."""
    mapping = ChunkMapping()
    for name, tokens, setting in (
        ("min", min_tokens, "min_chunk_size"),
        ("max", max_tokens, "max_chunk_size"),
    ):
        if tokens is not None:
            mapping.settings[setting] = tokens * TOKEN_CHARS
            mapping.origins[setting] = f"{key}.{name}"
    return mapping


def line_window_chunking(
    lines: int | None,
    overlap: int | None,
    *,
    keys: tuple[str, str] = ("chunk_size", "chunk_overlap"),
) -> ChunkMapping:
    """002's ``chunk_size`` / ``chunk_overlap``: the ``"lines"`` strategy, windows of
    ``lines`` non-empty lines, each starting ``lines - overlap`` lines after the one before
    (either may be None: not given, the strategy's default)."""
    mapping = ChunkMapping()
    for key, value, setting in zip(
        keys, (lines, overlap), ("chunk_size", "chunk_overlap"), strict=True
    ):
        if value is not None:
            mapping.settings[setting] = value
            mapping.origins[setting] = key
    if mapping.settings:
        mapping.settings["strategy"] = "lines"
        mapping.origins["strategy"] = " and ".join(mapping.origins.values())
    return mapping
