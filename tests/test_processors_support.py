"""Shared checks for the processor tests (no tests of its own)."""

from __future__ import annotations

import pickle

from hypothesis import strategies as st

from knowledge_agent.chunking import ChunkConfig
from knowledge_agent.chunking.windows import count_lines, count_tokens
from knowledge_agent.processors import ProcessedDocument

SOURCE_TYPES = {"markdown", "text", "html", "pdf", "code", "data", "log"}


def chunk_size(text: str, config: ChunkConfig) -> int:
    """A chunk's size in its strategy's unit: characters, non-blank lines or tokens."""
    if config.strategy == "lines":
        return count_lines(text)
    if config.strategy == "tokens":
        return count_tokens(text)
    return len(text)


def size_limit(config: ChunkConfig) -> int:
    """The largest chunk ``config`` allows, in its strategy's unit."""
    return config.max_chunk_size if config.strategy == "headings" else config.size


def window_configs(base: st.SearchStrategy[ChunkConfig]) -> st.SearchStrategy[ChunkConfig]:
    """``base`` (headings configs) or small ``lines`` / ``tokens`` configs of any overlap."""
    windows = st.integers(1, 12).flatmap(
        lambda size: st.builds(
            ChunkConfig,
            strategy=st.sampled_from(["lines", "tokens"]),
            chunk_size=st.just(size),
            chunk_overlap=st.integers(0, size - 1),
        )
    )
    return st.one_of(base, windows)


def check_document(document: ProcessedDocument) -> None:
    """The ProcessedDocument contract, for any processor.

    Chunks are exact, trimmed, non-empty slices in order with sequential indices and no
    item yet; line numbers follow from positions; every non-whitespace character of the
    content is in some chunk; the document survives pickling (worker processes).
    """
    content = document.content
    assert document.source_type in SOURCE_TYPES
    assert document.title.strip()
    assert document.chunks, "non-blank content gives chunks"
    covered = bytearray(len(content))
    for index, chunk in enumerate(document.chunks):
        assert chunk.item_id == ""
        assert chunk.chunk_index == index
        assert chunk.content.strip()
        assert content[chunk.start_position : chunk.end_position] == chunk.content
        assert chunk.metadata["start_line"] == content.count("\n", 0, chunk.start_position) + 1
        assert chunk.metadata["end_line"] == content.count("\n", 0, chunk.end_position - 1) + 1
        covered[chunk.start_position : chunk.end_position] = b"\x01" * len(chunk.content)
    missing = [i for i, char in enumerate(content) if not char.isspace() and not covered[i]]
    assert not missing, f"characters outside every chunk at {missing[:5]}"
    assert pickle.loads(pickle.dumps(document)) == document
