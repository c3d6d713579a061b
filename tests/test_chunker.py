"""ContentChunker: the three levels, the size rules and the R2 invariants."""

from __future__ import annotations

import itertools
import logging

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_processors_support import chunk_size, size_limit, window_configs

from knowledge_agent.chunking import ChunkConfig, ContentChunker
from knowledge_agent.chunking import content_chunker as chunker_module
from knowledge_agent.errors import ConfigError
from knowledge_agent.models import KnowledgeChunk

LOREM = (
    "Whoosh is a library of classes and functions for indexing text and then searching the "
    "index. It allows you to develop custom search engines for your content. "
)


def check_invariants(text: str, chunks: list[KnowledgeChunk], config: ChunkConfig) -> None:
    if not text.strip():
        assert chunks == []
        return
    assert chunks, "non-blank input gives at least one chunk (R2.8)"
    covered = bytearray(len(text))
    for index, chunk in enumerate(chunks):
        assert chunk.chunk_index == index  # R2.10
        assert chunk.content.strip()  # R2.9
        assert text[chunk.start_position : chunk.end_position] == chunk.content  # R2.5
        assert chunk_size(chunk.content, config) <= size_limit(config)
        assert chunk.metadata["start_line"] == text.count("\n", 0, chunk.start_position) + 1
        assert chunk.metadata["end_line"] == text.count("\n", 0, chunk.end_position - 1) + 1
        covered[chunk.start_position : chunk.end_position] = b"\x01" * len(chunk.content)
    missing = [i for i, char in enumerate(text) if not char.isspace() and not covered[i]]
    assert not missing, f"characters outside every chunk at {missing[:5]}"


configs = window_configs(
    st.builds(
        lambda min_size, extra, overlap: ChunkConfig(
            min_chunk_size=min_size, max_chunk_size=min_size + extra, overlap_ratio=overlap
        ),
        st.integers(1, 40),
        st.integers(0, 160),
        st.floats(0, 0.9),
    )
)

markdown_fragments = st.sampled_from(
    [
        "# Title\n",
        "## Sub heading\n",
        "###### deep\n",
        "#not-a-heading\n",
        "Setext\n======\n",
        "Other\n---\n",
        "---\n",
        "```python\n# comment, not a heading\nx = 1\n\n\ny = 2\n```\n",
        "~~~\ncode\n",
        "```\n",
        "\n",
        "\n\n",
        "\r\n",
        "   \n",
        "- item one\n- item two\n",
        "> quoted\n",
        "| a | b |\n",
        LOREM,
        "如何重置密码？请打开设置页面，然后点击账户。",
        "数据库连接失败时应该检查网络配置和防火墙规则。",
        "word" * 30,
        "\t",
        " ",
    ]
)
markdown_text = st.lists(st.one_of(markdown_fragments, st.text(max_size=40)), max_size=30).map(
    "".join
)
any_text = st.one_of(st.text(max_size=600), markdown_text)


@settings(max_examples=300, deadline=None)
@given(text=any_text, config=configs)
def test_invariants_hold_for_any_text_and_config(text: str, config: ChunkConfig) -> None:
    chunks = ContentChunker(config).chunk(text, title="T")
    check_invariants(text, chunks, config)


@settings(max_examples=200, deadline=None)
@given(text=markdown_text)
def test_invariants_hold_with_default_config(text: str) -> None:
    config = ChunkConfig()
    check_invariants(text, ContentChunker(config).chunk(text), config)


@settings(max_examples=200, deadline=None)
@given(
    text=st.text(
        alphabet=st.sampled_from("重置密码数据库连接失败。，！？的是了在 "),
        min_size=0,
        max_size=800,
    ),
    config=configs,
)
def test_invariants_hold_for_cjk_text(text: str, config: ChunkConfig) -> None:
    check_invariants(text, ContentChunker(config).chunk(text), config)


@settings(max_examples=200, deadline=None)
@given(text=st.text(alphabet=" \t\r\n\x0b\x0c\u3000\u2028\xa0", max_size=50))
def test_blank_input_gives_no_chunks(text: str) -> None:
    assert ContentChunker().chunk(text) == []


def test_short_document_is_one_chunk_r2_3() -> None:
    config = ChunkConfig(min_chunk_size=100, max_chunk_size=1500)
    text = "# A\n\npara one.\n\n# B\n\n" + "x" * 150
    assert len(text) < 200
    chunks = ContentChunker(config).chunk("\n  " + text + "  \n", title="Short")
    assert len(chunks) == 1
    assert chunks[0].content == text
    assert chunks[0].heading == "Short"


def test_document_at_twice_min_size_is_split_by_headings() -> None:
    section = "x " * 60
    text = f"# A\n\n{section}\n\n# B\n\n{section}"
    assert len(text) >= 200
    chunks = ContentChunker().chunk(text)
    assert [c.heading for c in chunks] == ["A", "B"]


def test_heading_paths_and_title_for_preamble_r2_6() -> None:
    body = LOREM * 2
    text = (
        f"Preamble. {body}\n\n# Install\n\n{body}\n\n## Linux\n\n{body}\n\n"
        f"### Debian\n\n{body}\n\n## Windows\n\n{body}\n\n# Usage\n\n{body}"
    )
    chunks = ContentChunker().chunk(text, title="Guide")
    assert [c.heading for c in chunks] == [
        "Guide",
        "Install",
        "Install > Linux",
        "Install > Linux > Debian",
        "Install > Windows",
        "Usage",
    ]
    assert chunks[1].content.startswith("# Install")


def test_setext_headings_and_closing_hashes() -> None:
    body = LOREM * 2
    text = (
        f"Top Title\n=========\n\n{body}\n\nSecond ##\n---------\n\n{body}\n\n## Third ##\n\n{body}"
    )
    chunks = ContentChunker().chunk(text)
    assert [c.heading for c in chunks] == [
        "Top Title",
        "Top Title > Second ##",
        "Top Title > Third",
    ]


def test_hash_inside_fenced_code_is_not_a_heading() -> None:
    code = "```bash\n# install the package\npip install thing\n\n# run it\nthing --help\n```"
    text = f"# Setup\n\n{LOREM * 2}\n\n{code}\n\n{LOREM * 2}"
    chunks = ContentChunker().chunk(text)
    assert {c.heading for c in chunks} == {"Setup"}
    assert any(code in c.content for c in chunks), "the code block is kept whole"


def test_small_paragraphs_merge_within_a_section_only() -> None:
    text = "# A\n\none.\n\ntwo.\n\nthree.\n\n# B\n\nfour.\n\nfive." + "\n\n" + "z " * 120
    chunks = ContentChunker().chunk(text)
    assert chunks[0].content == "# A\n\none.\n\ntwo.\n\nthree."
    assert chunks[0].heading == "A"
    assert all(c.heading == "B" for c in chunks[1:])
    assert chunks[1].content.startswith("# B\n\nfour.\n\nfive.")


def test_paragraphs_at_least_min_size_stay_separate() -> None:
    paragraphs = [f"Paragraph {i}. {LOREM}".strip() for i in range(4)]
    text = "\n\n".join(paragraphs)
    chunks = ContentChunker(ChunkConfig(min_chunk_size=100, max_chunk_size=1500)).chunk(text)
    assert [c.content for c in chunks] == paragraphs


def test_heading_followed_by_subheading_joins_the_next_section() -> None:
    text = f"# Install\n\n## Linux\n\n{LOREM * 2}\n\n## Mac\n\n{LOREM * 2}"
    chunks = ContentChunker().chunk(text)
    assert chunks[0].content.startswith("# Install\n\n## Linux")
    assert chunks[0].heading == "Install > Linux"
    assert chunks[1].heading == "Install > Mac"


def test_sliding_window_overlaps_and_breaks_at_sentence_ends_r2_4() -> None:
    config = ChunkConfig(min_chunk_size=50, max_chunk_size=300, overlap_ratio=0.2)
    text = " ".join(f"Sentence number {i} talks about topic {i}." for i in range(80))
    chunks = ContentChunker(config).chunk(text)
    assert len(chunks) > 5
    for before, after in itertools.pairwise(chunks):
        assert len(before.content) <= 300
        overlap = before.end_position - after.start_position
        assert 0 < overlap <= 0.2 * 300 + 40
        assert before.content.endswith("."), "cut after a sentence end"
        assert text[after.start_position - 1] == " ", "next piece starts at a word"


def test_window_never_cuts_inside_a_word_when_whitespace_exists() -> None:
    config = ChunkConfig(min_chunk_size=20, max_chunk_size=120, overlap_ratio=0.3)
    text = " ".join(["alpha", "bravo", "charlie", "delta", "echo", "foxtrot"] * 60)
    chunks = ContentChunker(config).chunk(text)
    assert len(chunks) > 10
    for chunk in chunks:
        start, end = chunk.start_position, chunk.end_position
        assert start == 0 or text[start - 1] == " "
        assert end == len(text) or text[end] == " "


def test_window_on_chinese_without_spaces() -> None:
    config = ChunkConfig(min_chunk_size=20, max_chunk_size=100, overlap_ratio=0.2)
    sentence = "数据库连接失败时应该先检查网络配置和防火墙规则然后重启服务。"
    text = sentence * 20
    chunks = ContentChunker(config).chunk(text)
    check_invariants(text, chunks, config)
    assert all(c.content.endswith("。") for c in chunks[:-1]), "cut after 。"
    no_punctuation = "检查网络配置" * 60
    check_invariants(no_punctuation, ContentChunker(config).chunk(no_punctuation), config)


def test_big_code_block_is_split_at_line_ends() -> None:
    config = ChunkConfig(min_chunk_size=20, max_chunk_size=200, overlap_ratio=0.1)
    lines = [f"value_{i} = compute(value_{i - 1}) + {i}. # step {i}" for i in range(1, 40)]
    code = "```python\n" + "\n".join(lines) + "\n```"
    text = f"# Code\n\n{code}"
    chunks = ContentChunker(config).chunk(text)
    check_invariants(text, chunks, config)
    assert len(chunks) > 3
    for chunk in chunks[:-1]:
        assert text[chunk.end_position] in "\r\n", "code is cut at a line end"


def test_small_code_block_is_kept_whole() -> None:
    code = "```\n" + "\n".join(f"line {i}" for i in range(30)) + "\n```"
    text = f"# Code\n\n{LOREM}\n\n{code}\n\n{LOREM}"
    chunks = ContentChunker(ChunkConfig(min_chunk_size=50, max_chunk_size=400)).chunk(text)
    assert any(code in c.content for c in chunks)


def test_crlf_documents_find_headings_and_keep_offsets() -> None:
    text = f"# One\r\n\r\n{LOREM * 2}\r\n\r\n## Two\r\n\r\n{LOREM * 2}"
    chunks = ContentChunker().chunk(text)
    assert [c.heading for c in chunks] == ["One", "One > Two"]
    for chunk in chunks:
        assert text[chunk.start_position : chunk.end_position] == chunk.content


def test_front_matter_is_not_a_setext_heading() -> None:
    text = f"---\ntitle: Guide\ntags: [a]\n---\n\n{LOREM * 2}\n\n# Real\n\n{LOREM * 2}"
    chunks = ContentChunker().chunk(text, title="Guide")
    assert [c.heading for c in chunks] == ["Guide", "Real"]


def test_line_numbers_follow_positions() -> None:
    text = f"# A\n\n{LOREM * 3}\n\nline\n\n# B\n\n{LOREM * 3}\n"
    for chunk in ContentChunker().chunk(text):
        assert chunk.metadata["start_line"] == text.count("\n", 0, chunk.start_position) + 1
        assert chunk.metadata["end_line"] == text.count("\n", 0, chunk.end_position) + 1


def test_chunks_have_unique_ids_and_no_item_yet() -> None:
    chunks = ContentChunker().chunk(f"# A\n\n{LOREM * 3}\n\n# B\n\n{LOREM * 3}")
    assert len({c.id for c in chunks}) == len(chunks)
    assert all(c.item_id == "" for c in chunks)


def test_failure_inside_a_level_falls_back_to_one_chunk_r2_7(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(chunker_module, "_parse_blocks", broken)
    text = f"\n# A\n\n{LOREM * 5}\n"
    with caplog.at_level(logging.ERROR, logger=chunker_module.__name__):
        chunks = ContentChunker().chunk(text, title="T")
    assert len(chunks) == 1
    assert chunks[0].content == text.strip()
    assert chunks[0].heading == "T"
    assert "chunking failed" in caplog.text


@pytest.mark.parametrize(
    "kwargs",
    [
        {"min_chunk_size": 0},
        {"max_chunk_size": -5},
        {"min_chunk_size": 200, "max_chunk_size": 100},
        {"overlap_ratio": 1.0},
        {"overlap_ratio": -0.1},
        {"min_chunk_size": 10.5},
        {"max_chunk_size": True},
        {"overlap_ratio": "0.2"},
    ],
)
def test_bad_config_raises_config_error(kwargs: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        ChunkConfig(**kwargs)  # type: ignore[arg-type]


def test_default_config_values_r2_2() -> None:
    config = ChunkConfig()
    assert (config.min_chunk_size, config.max_chunk_size, config.overlap_ratio) == (100, 1500, 0.2)


def test_small_paragraphs_grow_to_min_size_not_to_max() -> None:
    config = ChunkConfig(min_chunk_size=50, max_chunk_size=1000)
    paragraphs = [f"Example {i}: run the tool with flag {i}." for i in range(6)]  # ~37 chars
    text = "\n\n".join(paragraphs)
    chunks = ContentChunker(config).chunk(text)
    assert [c.content for c in chunks] == [
        "\n\n".join(paragraphs[i : i + 2]) for i in range(0, 6, 2)
    ], "each piece stops growing once it reaches min_chunk_size"


def test_a_small_last_paragraph_joins_the_piece_before_it() -> None:
    config = ChunkConfig(min_chunk_size=50, max_chunk_size=1000)
    big = ["A" * 60, "B" * 60]
    text = "\n\n".join([*big, "tail."])
    chunks = ContentChunker(config).chunk(text)
    assert [c.content for c in chunks] == [big[0], f"{big[1]}\n\ntail."]


def test_attribute_lists_are_not_part_of_heading_paths() -> None:
    from knowledge_agent.chunking.headings import clean_heading

    text = (
        "# Lifespan Events { #lifespan-events }\n\n" + "Startup and shutdown logic. " * 6 + "\n\n"
        '## Use cases {: .note #cases data-x="a b" }\n\n' + "Load a model once. " * 8 + "\n"
    )
    chunks = ContentChunker(ChunkConfig(min_chunk_size=50, max_chunk_size=200)).chunk(text)
    assert {c.heading for c in chunks} >= {"Lifespan Events", "Lifespan Events > Use cases"}
    assert all(text[c.start_position : c.end_position] == c.content for c in chunks)
    assert clean_heading("Sets use {braces} in Python") == "Sets use {braces} in Python"
    assert clean_heading("Config {x}") == "Config {x}"  # no #id, .class or key=value: words
