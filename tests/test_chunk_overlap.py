"""The sliding window's overlap (003 R2.4): neighbouring window pieces share
``int(overlap_ratio * max_chunk_size)`` characters — of the maximum chunk size, never the
minimum — stated exactly where the text offers no break point to move the cut."""

from __future__ import annotations

import random
from itertools import pairwise

from hypothesis import given, settings
from hypothesis import strategies as st

from knowledge_agent import ChunkConfig, ContentChunker, KnowledgeChunk


def _sequence(length: int, seed: int = 7) -> str:
    """A DNA sequence: one long run of letters with no space, sentence or line end, so every
    cut falls exactly at ``max_chunk_size`` and every overlap is the configured one."""
    rng = random.Random(seed)
    return "".join(rng.choice("ACGT") for _ in range(length))


def _overlaps(chunks: list[KnowledgeChunk]) -> list[int]:
    return [before.end_position - after.start_position for before, after in pairwise(chunks)]


def test_small_chunks_overlap_by_the_ratio_of_the_maximum_size() -> None:
    config = ChunkConfig(min_chunk_size=20, max_chunk_size=100, overlap_ratio=0.25)
    text = _sequence(1000)
    chunks = ContentChunker(config).chunk(text)
    assert [(c.start_position, c.end_position) for c in chunks[:3]] == [
        (0, 100),
        (75, 175),
        (150, 250),
    ]
    assert set(_overlaps(chunks)) == {25}  # 0.25 × 100, not 0.25 × 20
    assert len(chunks) == 13  # (1000 - 25) / 75, rounded up
    assert chunks[-1].end_position == len(text)


def test_default_chunks_overlap_by_300_characters() -> None:
    config = ChunkConfig()  # 100, 1500, 0.2
    text = _sequence(5000)
    chunks = ContentChunker(config).chunk(text)
    assert [(c.start_position, c.end_position) for c in chunks] == [
        (0, 1500),
        (1200, 2700),
        (2400, 3900),
        (3600, 5000),
    ]
    assert set(_overlaps(chunks)) == {300}  # 0.2 × 1500, not 0.2 × 100


def test_prose_overlaps_by_at_most_the_ratio_and_starts_at_a_word() -> None:
    """In prose the next piece starts at the first word inside the overlap: never more
    than ``overlap_ratio * max_chunk_size`` back, and less only by part of one word."""
    sentence = "The tide comes in twice a day. "
    text = sentence * 200
    for config, overlap in (
        (ChunkConfig(min_chunk_size=20, max_chunk_size=100, overlap_ratio=0.25), 25),
        (ChunkConfig(), 300),
    ):
        chunks = ContentChunker(config).chunk(text)
        assert len(chunks) > 3
        for shared, after in zip(_overlaps(chunks), chunks[1:], strict=True):
            assert overlap - len("twice ") <= shared <= overlap
            assert text[after.start_position - 1] == " "


@settings(max_examples=60, deadline=None)
@given(
    min_size=st.integers(10, 200),
    extra=st.integers(0, 400),
    ratio=st.floats(0.0, 0.9),
)
def test_every_overlap_of_unbroken_text_is_the_ratio_of_the_maximum(
    min_size: int, extra: int, ratio: float
) -> None:
    config = ChunkConfig(
        min_chunk_size=min_size, max_chunk_size=min_size + extra, overlap_ratio=ratio
    )
    text = _sequence(3 * config.max_chunk_size + 7, seed=min_size)
    chunks = ContentChunker(config).chunk(text)
    overlap = int(config.max_chunk_size * ratio)
    assert set(_overlaps(chunks)) == {overlap}
    assert all(len(c.content) == config.max_chunk_size for c in chunks[:-1])
    assert chunks[-1].end_position == len(text)
