"""The lines and tokens chunking strategies: their windows, their settings, and re-chunking
collected paths when the settings change (the invariants of every strategy are checked by
the property tests of test_chunker, test_chunk_sections and test_processors)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from knowledge_agent import KnowledgeAgentCore, analysis
from knowledge_agent.chunking import ChunkConfig, ContentChunker, windows
from knowledge_agent.chunking.windows import TOKEN, count_tokens
from knowledge_agent.errors import ConfigError
from knowledge_agent.settings import load_config

OpenCore = Callable[..., KnowledgeAgentCore]


def test_lines_merge_non_blank_lines_by_a_sliding_window_as_002_describes() -> None:
    # 002: lines l1..l7, chunk_size=4, chunk_overlap=1 -> step 3: l1-l4, l4-l7.
    text = "l1\nl2\n\n   \nl3\nl4\nl5\n\nl6\nl7\n"
    config = ChunkConfig(strategy="lines", chunk_size=4, chunk_overlap=1)
    chunks = ContentChunker(config).chunk(text)
    assert [chunk.content.split() for chunk in chunks] == [
        ["l1", "l2", "l3", "l4"],
        ["l4", "l5", "l6", "l7"],
    ]
    assert [(c.metadata["start_line"], c.metadata["end_line"]) for c in chunks] == [(1, 6), (6, 10)]


def test_the_window_defaults_are_002s_lines_and_000s_chunk_tokens() -> None:
    assert (ChunkConfig(strategy="lines").size, ChunkConfig(strategy="lines").overlap) == (10, 2)
    tokens = ChunkConfig(strategy="tokens")
    assert (tokens.size, tokens.overlap) == (400, 80)
    assert ChunkConfig().to_dict() == {
        "strategy": "headings",
        "min_chunk_size": 100,
        "max_chunk_size": 1500,
        "overlap_ratio": 0.2,
    }


def test_token_windows_hold_chunk_size_tokens_and_start_size_minus_overlap_apart() -> None:
    words = [f"w{i}" for i in range(1000)]
    chunks = ContentChunker(ChunkConfig(strategy="tokens")).chunk(" ".join(words))
    assert [chunk.content.split()[0] for chunk in chunks] == ["w0", "w320", "w640"]
    assert [count_tokens(chunk.content) for chunk in chunks] == [400, 400, 360]


def test_a_token_is_a_word_a_cjk_character_or_a_punctuation_mark() -> None:
    text = "retry_count = max(3, n)  # 重置密码"
    assert [m.group() for m in TOKEN.finditer(text)] == [
        "retry_count", "=", "max", "(", "3", ",", "n", ")", "#", "重", "置", "密", "码",
    ]  # fmt: skip


def test_tokens_know_the_cjk_characters_the_analyzer_knows() -> None:
    assert windows.CJK_CHARACTERS == analysis.CJK_CHARACTERS


def test_chunks_of_the_window_strategies_are_headed_by_the_section_they_start_in() -> None:
    text = "Intro line.\n# Install\nstep one\nstep two\n## Linux\napt install\nmore\n"
    config = ChunkConfig(strategy="lines", chunk_size=2, chunk_overlap=0)
    chunks = ContentChunker(config).chunk(text, title="Guide")
    assert [(chunk.content.split("\n")[0], chunk.heading) for chunk in chunks] == [
        ("Intro line.", "Guide"),
        ("step one", "Install"),
        ("## Linux", "Install > Linux"),
        ("more", "Install > Linux"),
    ]
    assert chunks[0].metadata["sections"] == [[12, "Install"]]


code_lines = st.lists(
    st.sampled_from(
        [
            "def f(x):",
            "    return compute(x, y, z) + other(x)",
            "",
            "class A:",
            "    value = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18]",
            "    # a comment",
            "x = 1",
        ]
    ),
    min_size=1,
    max_size=40,
)


@settings(max_examples=150, deadline=None)
@given(lines=code_lines, size=st.integers(1, 30), data=st.data())
def test_code_token_windows_end_at_line_ends_unless_one_line_is_too_long(
    lines: list[str], size: int, data: st.DataObject
) -> None:
    text = "\n".join(lines)
    config = ChunkConfig(
        strategy="tokens", chunk_size=size, chunk_overlap=data.draw(st.integers(0, size - 1))
    )
    chunks = ContentChunker(config).chunk_sections(text, [(0, len(text), "m")], code=True)
    for chunk in chunks:
        assert count_tokens(chunk.content) <= size
        first_line = text[: chunk.start_position].rpartition("\n")[2]
        last_line = text[chunk.end_position :].partition("\n")[0]
        if count_tokens(first_line + chunk.content.split("\n")[0]) <= size:
            assert not first_line.strip(), "a line that fits is not cut at its start"
        if count_tokens(chunk.content.split("\n")[-1] + last_line) <= size:
            assert not last_line.strip(), "a line that fits is not cut at its end"


@pytest.mark.parametrize(
    ("settings_", "message"),
    [
        ({"strategy": "words"}, "strategy must be one of 'headings', 'lines', 'tokens'"),
        ({"strategy": "lines", "chunk_overlap": 10}, r"chunk_overlap \(10\) must be less than"),
        ({"strategy": "tokens", "chunk_size": 80, "chunk_overlap": 80}, "chunk_overlap"),
        ({"strategy": "lines", "chunk_size": 0}, "chunk_size must be a positive integer"),
        ({"strategy": "lines", "chunk_overlap": -1}, "chunk_overlap must be an integer >= 0"),
        ({"chunk_size": 10}, "chunk_size applies to the 'lines' and 'tokens' strategies"),
    ],
)
def test_bad_settings_are_one_line_errors_naming_the_key(
    settings_: dict[str, Any], message: str, tmp_path: Path
) -> None:
    with pytest.raises(ConfigError, match=message) as raised:
        ChunkConfig(**settings_)
    assert "\n" not in str(raised.value)
    with pytest.raises(ConfigError, match=rf"^chunking\.{message}"):
        KnowledgeAgentCore(chunking=settings_)
    lines = [f"{key} = {value!r}".replace("'", '"') for key, value in settings_.items()]
    (tmp_path / ".knowledge-agent.toml").write_text("[chunking]\n" + "\n".join(lines) + "\n")
    with pytest.raises(ConfigError, match=rf"chunking\.{message}"):
        load_config(tmp_path / ".knowledge-agent.toml")


def test_the_project_file_sets_the_strategy(tmp_path: Path) -> None:
    path = tmp_path / ".knowledge-agent.toml"
    path.write_text('[chunking]\nstrategy = "tokens"\nchunk_size = 200\n')
    config = load_config(path).chunk_config
    assert (config.strategy, config.size, config.overlap) == ("tokens", 200, 80)


def test_chunking_and_chunk_config_are_one_setting() -> None:
    with pytest.raises(ConfigError, match="give one"):
        KnowledgeAgentCore(chunking={"strategy": "lines"}, chunk_config={})


# -- a change of settings re-chunks at the next sync -----------------------------------------


@pytest.fixture(params=["local", "postgresql"])
def reopen(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[OpenCore]:
    """Opens the same knowledge base again each call (with new options), on each backend."""
    if request.param == "local":
        where: dict[str, Any] = {"data_dir": tmp_path / "kb"}
    else:
        where = {"backend": request.getfixturevalue("postgres_server").new_database()}
    opened: list[KnowledgeAgentCore] = []

    def open_(**options: Any) -> KnowledgeAgentCore:
        for core in opened:
            core.close()
        core = KnowledgeAgentCore(**where, **options)
        opened.append(core)
        return core

    yield open_
    for core in opened:
        core.close()


def _notes(folder: Path) -> Path:
    folder.mkdir()
    lines = [f"Line {i} says the pump needs valve number {i}." for i in range(30)]
    (folder / "pump.txt").write_text("\n".join(lines) + "\n")
    (folder / "retry.py").write_text("def retry():\n    return backoff()\n")
    return folder


def _chunks(core: KnowledgeAgentCore, name: str) -> list[str]:
    (item,) = [i for i in core.list_items() if i.source_uri and i.source_uri.endswith(name)]
    return [chunk.content for chunk in core.storage.get_chunks_for_item(item.id)]


def test_a_changed_strategy_re_chunks_every_collected_file_at_the_next_sync(
    reopen: OpenCore, tmp_path: Path
) -> None:
    folder = _notes(tmp_path / "notes")
    core = reopen()
    core.collect_knowledge(folder)
    assert len(_chunks(core, "pump.txt")) == 1  # 1.4 KB: one chunk under headings
    assert core.status().rechunk_pending == []

    lines = {"strategy": "lines", "chunk_size": 10, "chunk_overlap": 2}
    core = reopen(chunking=lines)
    status = core.status()
    assert status.chunking == lines
    assert status.rechunk_pending == [str(folder)]
    report = core.sync()
    assert (report.processed, report.unchanged) == (2, 0)
    chunks = _chunks(core, "pump.txt")
    assert [chunk.split("\n")[0] for chunk in chunks] == [
        "Line 0 says the pump needs valve number 0.",
        "Line 8 says the pump needs valve number 8.",
        "Line 16 says the pump needs valve number 16.",
        "Line 24 says the pump needs valve number 24.",
    ]
    assert core.status().rechunk_pending == []
    (best,) = core.search("valve number 17", limit=1)
    assert "valve number 17." in best.matched_chunks[0].content

    core = reopen(chunking=lines)
    assert core.sync().unchanged == 2, "the same settings re-chunk nothing"
    core = reopen(chunking=lines | {"chunk_overlap": 0})
    assert core.sync().processed == 2, "a changed size re-chunks too"
    assert len(_chunks(core, "pump.txt")) == 3
