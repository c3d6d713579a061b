"""ContentChunker.chunk_sections: caller-supplied spans, windowed and merged."""

from __future__ import annotations

import itertools
import logging

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_processors_support import chunk_size, size_limit, window_configs

from knowledge_agent.chunking import ChunkConfig, ContentChunker, Section
from knowledge_agent.chunking import content_chunker as chunker_module
from knowledge_agent.models import KnowledgeChunk


def check_section_invariants(
    text: str, sections: list[Section], chunks: list[KnowledgeChunk], config: ChunkConfig
) -> None:
    covered = bytearray(len(text))
    for index, chunk in enumerate(chunks):
        assert chunk.chunk_index == index
        assert chunk.content.strip()
        assert chunk.content == chunk.content.strip(), "chunks are trimmed"
        assert text[chunk.start_position : chunk.end_position] == chunk.content
        assert chunk_size(chunk.content, config) <= size_limit(config)
        assert chunk.metadata["start_line"] == text.count("\n", 0, chunk.start_position) + 1
        assert chunk.metadata["end_line"] == text.count("\n", 0, chunk.end_position - 1) + 1
        covered[chunk.start_position : chunk.end_position] = b"\x01" * len(chunk.content)
    for section in sections:
        start, end = max(0, section.start), min(len(text), section.end)
        missing = [i for i in range(start, end) if not text[i].isspace() and not covered[i]]
        assert not missing, f"section characters outside every chunk at {missing[:5]}"
    starts = [chunk.start_position for chunk in chunks]
    assert starts == sorted(starts), "chunks come in document order"


fragments = st.sampled_from(
    [
        "def f(x):\n    return x\n",
        "\n",
        "\n\n",
        "    ",
        "class A:\n    pass\n",
        "word " * 12,
        "如何重置密码？请打开设置页面。",
        "x" * 70,
        "# not a heading here\n",
    ]
)
texts = st.lists(st.one_of(fragments, st.text(max_size=30)), min_size=1, max_size=25).map("".join)
configs = window_configs(
    st.builds(
        lambda min_size, extra, overlap: ChunkConfig(
            min_chunk_size=min_size, max_chunk_size=min_size + extra, overlap_ratio=overlap
        ),
        st.integers(1, 60),
        st.integers(0, 200),
        st.floats(0, 0.9),
    )
)


@st.composite
def text_and_sections(draw: st.DrawFn) -> tuple[str, list[Section]]:
    """A text and a cover of it by contiguous sections (what the processors pass)."""
    text = draw(texts)
    cuts = sorted(set(draw(st.lists(st.integers(0, len(text)), max_size=12))))
    bounds = [0, *cuts, len(text)]
    sections = [
        Section(start, end, f"s{index}", {"n": index, "kind": "same"})
        for index, (start, end) in enumerate(itertools.pairwise(bounds))
    ]
    return text, sections


@settings(max_examples=300, deadline=None)
@given(data=text_and_sections(), config=configs, code=st.booleans(), merge=st.booleans())
def test_invariants_for_any_sections(
    data: tuple[str, list[Section]], config: ChunkConfig, code: bool, merge: bool
) -> None:
    text, sections = data
    chunks = ContentChunker(config).chunk_sections(text, sections, code=code, merge_small=merge)
    check_section_invariants(text, sections, chunks, config)
    if not text.strip():
        assert chunks == []


@settings(max_examples=200, deadline=None)
@given(
    text=texts,
    spans=st.lists(st.tuples(st.integers(-5, 300), st.integers(-5, 300)), max_size=8),
    config=configs,
)
def test_overlapping_unsorted_and_out_of_range_spans_are_tolerated(
    text: str, spans: list[tuple[int, int]], config: ChunkConfig
) -> None:
    sections = [Section(start, end, "h") for start, end in spans]
    chunks = ContentChunker(config).chunk_sections(text, sections)
    check_section_invariants(text, sections, chunks, config)


def test_each_section_keeps_its_heading_and_metadata() -> None:
    body = "x = compute(value)\n" * 8  # 152 characters: above min_chunk_size
    text = f"def first():\n{body}\n\ndef second():\n{body}"
    middle = text.index("def second")
    sections = [
        Section(0, middle, "first", {"symbol": "first"}),
        Section(middle, len(text), "second", {"symbol": "second"}),
    ]
    chunks = ContentChunker().chunk_sections(text, sections, code=True)
    assert [c.heading for c in chunks] == ["first", "second"]
    assert [c.metadata["symbol"] for c in chunks] == ["first", "second"]
    assert chunks[1].content.startswith("def second():")
    assert chunks[1].metadata["start_line"] == 12


def test_tuples_are_accepted_as_sections() -> None:
    text = "alpha " * 40 + "\n\n" + "bravo " * 40
    middle = text.index("bravo")
    chunks = ContentChunker().chunk_sections(text, [(0, middle, "A"), (middle, len(text), "B")])
    assert [c.heading for c in chunks] == ["A", "B"]


def test_long_section_is_windowed_at_line_ends_for_code() -> None:
    config = ChunkConfig(min_chunk_size=20, max_chunk_size=200, overlap_ratio=0.1)
    lines = [f"    total_{i} = add(total_{i - 1}, {i})  # step. {i}" for i in range(1, 40)]
    text = "def big():\n" + "\n".join(lines)
    chunks = ContentChunker(config).chunk_sections(
        text, [Section(0, len(text), "big", {"symbol": "big"})], code=True
    )
    assert len(chunks) > 3
    assert all(c.heading == "big" and c.metadata["symbol"] == "big" for c in chunks)
    for chunk in chunks[:-1]:
        assert text[chunk.end_position] == "\n", "code pieces end at a line end"
    check_section_invariants(text, [Section(0, len(text), "big")], chunks, config)


def test_small_neighbours_merge_and_join_their_headings() -> None:
    config = ChunkConfig(min_chunk_size=100, max_chunk_size=1500)
    small = ["def a():\n    return 1", "def b():\n    return 2", "def c():\n    return 3"]
    big = "def d():\n" + "    value = 1\n" * 20
    parts = [*small, big]
    text = "\n\n".join(parts)
    sections, position = [], 0
    for part, name in zip(parts, "abcd", strict=True):
        start = text.index(part, position)
        position = start + len(part)
        sections.append(Section(start, position, f"Parser > {name}", {"symbol": name, "k": 1}))
    chunks = ContentChunker(config).chunk_sections(text, sections, code=True)
    assert [c.heading for c in chunks] == ["Parser > a, b, c", "Parser > d"]
    assert chunks[0].content == "\n\n".join(small)
    sections_inside = [[text.index(small[1]), "Parser > b"], [text.index(small[2]), "Parser > c"]]
    assert chunks[0].metadata == {
        "k": 1,
        "start_line": 1,
        "end_line": 8,
        "sections": sections_inside,  # where each later section starts in the chunk
    }, "common entries only"
    assert chunks[1].metadata["symbol"] == "d", "a section of normal size keeps its own chunk"


def test_merge_small_false_keeps_every_section() -> None:
    text = "a = 1\n\nb = 2\n\nc = 3"
    sections = [Section(m, m + 5, name) for m, name in ((0, "a"), (7, "b"), (14, "c"))]
    chunks = ContentChunker().chunk_sections(text, sections, merge_small=False)
    assert [c.content for c in chunks] == ["a = 1", "b = 2", "c = 3"]


def test_parent_heading_joined_with_its_child_is_left_out() -> None:
    config = ChunkConfig(min_chunk_size=50, max_chunk_size=500)
    text = "Guide\n=====\n\nInstall\n-------\n\nRun it." + "\n\n" + "z " * 200
    tail = text.index("z ")
    sections = [
        Section(0, 13, "Guide"),
        Section(13, tail, "Guide > Install"),
        Section(tail, len(text), "Guide > Other"),
    ]
    chunks = ContentChunker(config).chunk_sections(text, sections)
    assert chunks[0].heading == "Guide > Install"


def test_short_document_is_one_chunk_as_with_chunk() -> None:
    text = "import os\n\ndef main():\n    return os.getcwd()\n"
    sections = [Section(0, 10, "mod"), Section(11, len(text), "main", {"symbol": "main"})]
    chunks = ContentChunker().chunk_sections(text, sections, code=True)
    assert len(chunks) == 1
    assert chunks[0].content == text.strip()
    assert chunks[0].heading == "mod, main"


def test_text_outside_every_section_is_not_chunked() -> None:
    text = "keep this part\n\nskip this part"
    chunks = ContentChunker().chunk_sections(text, [Section(0, 14, "k")])
    assert [c.content for c in chunks] == ["keep this part"]


def test_metadata_is_copied_not_shared() -> None:
    config = ChunkConfig(min_chunk_size=10, max_chunk_size=60)
    text = "word " * 60
    shared = {"symbols": ["a"]}
    chunks = ContentChunker(config).chunk_sections(text, [Section(0, len(text), "h", shared)])
    assert len(chunks) > 1
    chunks[0].metadata["symbols"].append("b")
    assert chunks[1].metadata["symbols"] == ["a"]
    assert shared == {"symbols": ["a"]}


def test_internal_error_falls_back_to_chunk(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(chunker_module, "_window", broken)
    text = "# A\n\n" + "word " * 400
    with caplog.at_level(logging.ERROR, logger=chunker_module.__name__):
        chunks = ContentChunker().chunk_sections(text, [Section(0, len(text), "A")])
    assert chunks, "falls back to chunk(), which has its own fallback"
    assert "section chunking failed" in caplog.text


def test_a_malformed_section_falls_back_instead_of_raising() -> None:
    chunks = ContentChunker().chunk_sections("some text", [("not", "a", "section")])  # type: ignore[list-item]
    assert [c.content for c in chunks] == ["some text"]


def test_section_is_exported_and_frozen() -> None:
    section = Section(1, 2, "h", {"a": 1})
    with pytest.raises(AttributeError):
        section.start = 5  # type: ignore[misc]
    assert Section(1, 2, "h", {"a": 1}) == section
