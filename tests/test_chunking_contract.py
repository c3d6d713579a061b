"""The chunker's cuts, overlaps, headings and sections, position by position."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from knowledge_agent.chunking.content_chunker import ChunkConfig, ContentChunker
from knowledge_agent.models.knowledge_chunk import KnowledgeChunk

# Pieces of at most 50 characters whose neighbours overlap by int(50 * 0.2) = 10.
_SMALL = ChunkConfig(min_chunk_size=10, max_chunk_size=50, overlap_ratio=0.2)
_OVERLAP = 10


def _spans(chunks: list[KnowledgeChunk]) -> list[tuple[int, int]]:
    return [(chunk.start_position, chunk.end_position) for chunk in chunks]


# First and last code points of the ranges read as CJK (no spaces between words).
@pytest.mark.parametrize("char", ["\u2e80", "\u9fff", "\uac00", "\ud7af", "\uf900", "\ufaff"])
def test_in_cjk_text_the_overlap_starts_exactly_overlap_characters_before_the_cut(
    char: str,
) -> None:
    text = (char * 7 + " ") * 12
    # Each cut falls after a space (at 48 and 88); the next piece starts 10 before it,
    # inside a run, where a CJK reader may start.
    assert _spans(ContentChunker(_SMALL).chunk(text)) == [(0, 47), (38, 87), (78, 95)]


def test_in_latin_text_the_overlap_starts_at_the_next_word() -> None:
    text = ("a" * 7 + " ") * 12
    assert _spans(ContentChunker(_SMALL).chunk(text)) == [(0, 47), (40, 87), (80, 95)]


def test_an_overlap_zone_starting_at_a_word_keeps_that_word() -> None:
    # The first piece is cut after "nine " (at 47); 10 before the cut, "many" begins.
    text = "one two three four five xx six seven many nine ten eleven twelve"
    chunks = ContentChunker(_SMALL).chunk(text)
    assert text[chunks[0].end_position + 1 - _OVERLAP :].startswith("many nine ")
    assert chunks[1].content == "many nine ten eleven twelve"


_WORDS = st.lists(st.text("abcdefghij", min_size=1, max_size=12), min_size=12, max_size=40)


@given(_WORDS)
def test_each_piece_overlaps_from_the_first_word_in_the_overlap_zone(words: list[str]) -> None:
    """Prose of short words (each window has a space in its second half) is cut after a
    space; the next piece starts at the first word beginning in the 10 characters before
    that cut."""
    text = " ".join(words)
    chunks = ContentChunker(_SMALL).chunk(text)
    for before, after in itertools.pairwise(chunks):
        cut = before.end_position + 1  # the trimmed piece ends before the space it was cut at
        zone = range(cut - _OVERLAP, cut + 1)
        first_word = next(p for p in zone if text[p - 1] == " ")
        assert after.start_position == first_word


@pytest.mark.parametrize("underline", ["===\u3000", "---\x0c"])
def test_an_underline_with_trailing_white_space_other_than_blanks_is_text(underline: str) -> None:
    # CommonMark lets a setext underline end in spaces and tabs only.
    text = f"Opening words.\n\nIntro\n{underline}\nbody"
    chunks = ContentChunker().chunk(text, title="T")
    assert [(chunk.heading, chunk.metadata.get("sections")) for chunk in chunks] == [("T", None)]


@pytest.mark.parametrize("line_end", ["\n", "\r\n"])
def test_an_underline_with_trailing_blanks_makes_a_heading(line_end: str) -> None:
    text = f"Opening words.{line_end}{line_end}Intro{line_end}=== \t{line_end}body"
    chunks = ContentChunker().chunk(text, title="T")
    start = text.index("Intro")
    assert [chunk.metadata.get("sections") for chunk in chunks] == [[[start, "Intro"]]]


def test_a_small_section_left_at_the_end_joins_the_merged_sections_before_it() -> None:
    chunker = ContentChunker(ChunkConfig(min_chunk_size=100, max_chunk_size=500))
    prefix = "x" * 1000 + "\n"  # outside every section: far into the document
    a, b, c = "alpha " * 10, "bravo " * 10, "charlie " * 11
    content = prefix + a + "\n" + b + "\n" + c
    starts = [len(prefix), len(prefix) + len(a) + 1, len(prefix) + len(a) + len(b) + 2]
    sections = [(starts[0], starts[1] - 1, "A"), (starts[1], starts[2] - 1, "B")]
    sections.append((starts[2], len(content), "C"))
    chunks = chunker.chunk_sections(content, sections)
    assert [(chunk.start_position, chunk.end_position, chunk.heading) for chunk in chunks] == [
        (1001, 1210, "A, B, C")
    ]


def test_text_between_sections_is_in_no_chunk() -> None:
    content = "header line\nfirst section text\ngap text that no section holds\nsecond section"
    first, gap, second = (content.index(word) for word in ("first", "gap", "second"))
    sections = [(first, gap, "one"), (second, len(content), "two")]
    chunks = ContentChunker().chunk_sections(content, sections, merge_small=False)
    assert [(chunk.content, chunk.start_position, chunk.heading) for chunk in chunks] == [
        ("first section text", first, "one"),
        ("second section", second, "two"),
    ]
