"""Terms, token spans, snippets and the Whoosh adapter, case by case."""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st
from whoosh.analysis import MultiFilter, PassFilter, SubstitutionFilter
from whoosh.fields import ID, TEXT, Schema
from whoosh.filedb.filestore import RamStorage
from whoosh.qparser import QueryParser

from knowledge_agent.analysis import AnalyzerConfig, TextAnalyzer, highlight

# Analyzers of one configuration share their token caches across a process. A configuration
# no other test uses makes each word here analysed afresh, whatever ran before.
_CONFIG = AnalyzerConfig(max_length=60)


@pytest.fixture
def analyzer() -> TextAnalyzer:
    return TextAnalyzer(_CONFIG)


def test_plain_words_are_stemmed_so_their_forms_meet(analyzer: TextAnalyzer) -> None:
    assert analyzer.terms("running runs run") == ["run", "run", "run"]


def test_a_word_with_markup_inside_is_the_word(analyzer: TextAnalyzer) -> None:
    assert analyzer.terms("E[x]tract the **b**ackup") == ["extract", "backup"]


def test_a_dotted_name_is_whole_then_each_part(analyzer: TextAnalyzer) -> None:
    assert analyzer.terms("os.path.join") == ["os.path.join", "os", "path", "join"]


def test_the_tokens_of_a_cjk_run_are_its_bigrams_at_their_offsets(analyzer: TextAnalyzer) -> None:
    tokens = [(t.text, t.start, t.end, t.position) for t in analyzer.tokens("如何重置密码")]
    assert tokens == [
        ("如何", 0, 2, 0),
        ("何重", 1, 3, 1),
        ("重置", 2, 4, 2),
        ("置密", 3, 5, 3),
        ("密码", 4, 6, 4),
    ]


_MIXED = st.text(st.sampled_from("ab Zx_.9如何重置密码すカ한글,。*[]é\u0301"), max_size=30)


@given(_MIXED)
def test_tokens_give_the_terms_in_order_with_spans_inside_the_text(text: str) -> None:
    analyzer = TextAnalyzer(_CONFIG)
    tokens = list(analyzer.tokens(text))
    assert [t.text for t in tokens] == analyzer.terms(text)
    assert [t.position for t in tokens] == list(range(len(tokens)))
    assert all(0 <= t.start < t.end <= len(text) for t in tokens)


@pytest.mark.parametrize("mark", ["\u0301", "\u0903", "\u20dd", "\ua670", "\ufe20", "\ufe2f"])
def test_a_combining_mark_never_splits_a_word(analyzer: TextAnalyzer, mark: str) -> None:
    # First and last marks of the blocks the word pattern lets continue a word.
    assert [(t.start, t.end) for t in analyzer.tokens(f"bc{mark}d")] == [(0, 4)]


def test_a_word_in_a_script_with_vowel_signs_is_one_term(analyzer: TextAnalyzer) -> None:
    assert analyzer.terms("हिन्दी भाषा") == ["हिन्दी", "भाषा"]


# --------------------------------------------------------------------------- jieba

_DICTIONARY = frozenset({"如何", "重置", "密码", "重置密码"})


def _jieba_tokenize(text: str, mode: str = "default", HMM: bool = True) -> Iterator[tuple]:
    """jieba.tokenize over a small dictionary: longest words first; search mode also
    gives the dictionary words inside a longer word, before it."""
    i = 0
    while i < len(text):
        word = next(
            text[i : i + size]
            for size in (4, 3, 2, 1)
            if size == 1 or text[i : i + size] in _DICTIONARY
        )
        if mode == "search" and len(word) > 2:
            for j in range(len(word) - 1):
                if word[j : j + 2] in _DICTIONARY:
                    yield word[j : j + 2], i + j, i + j + 2
        yield word, i, i + len(word)
        i += len(word)


def test_with_jieba_a_cjk_run_gives_its_search_mode_words(monkeypatch: pytest.MonkeyPatch) -> None:
    jieba = types.ModuleType("jieba")
    jieba.tokenize = _jieba_tokenize  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "jieba", jieba)
    analyzer = TextAnalyzer(AnalyzerConfig(cjk="jieba", max_length=60))
    expected = ["如何", "重置密码", "重置", "密码"]  # by start, the longer word first
    assert analyzer.terms("如何重置密码") == expected
    tokens = [(t.text, t.start, t.end) for t in analyzer.tokens("如何重置密码")]
    assert tokens == [("如何", 0, 2), ("重置密码", 2, 6), ("重置", 2, 4), ("密码", 4, 6)]


# --------------------------------------------------------------------------- snippets


def test_a_snippet_starts_at_a_word_not_inside_one(analyzer: TextAnalyzer) -> None:
    text = "the keys rotate keys 。 the"
    assert highlight(text, ["keys"], analyzer, max_chars=11) == "…**keys**…"


def test_a_snippet_cut_after_the_first_character_says_so(analyzer: TextAnalyzer) -> None:
    assert highlight("重置密码的方法很简单", ["密码"], analyzer, max_chars=4) == "…置**密码**的…"


def test_a_match_longer_than_the_snippet_is_marked_whole(analyzer: TextAnalyzer) -> None:
    assert highlight("请看重置密码的方法", ["重置密码"], analyzer, max_chars=3) == "…**重置密码**…"
    text = "see getUserNameFromTheDatabase here"
    assert highlight(text, ["getUserNameFromTheDatabase"], analyzer, max_chars=10) == (
        "…**getUserNameFromTheDatabase**…"
    )


# --------------------------------------------------------------------------- Whoosh


def test_a_whoosh_index_made_with_the_analyzer_finds_words_by_stem_and_prefix(
    analyzer: TextAnalyzer,
) -> None:
    schema = Schema(id=ID(stored=True), body=TEXT(analyzer=analyzer.whoosh_analyzer()))
    index = RamStorage().create_index(schema)
    with index.writer() as writer:
        writer.add_document(id="1", body="Rotating the vault keys")
    with index.searcher() as searcher:
        for query in ("rotate", "keys", "vau*"):
            hits = searcher.search(QueryParser("body", schema).parse(query))
            assert [hit["id"] for hit in hits] == ["1"], query


def test_a_whoosh_filter_after_the_analyzer_sees_the_mode_it_was_called_in(
    analyzer: TextAnalyzer,
) -> None:
    chain = analyzer.whoosh_analyzer() | MultiFilter(
        index=PassFilter(), query=SubstitutionFilter("^", "q:")
    )
    assert [t.text for t in chain("rotating keys", mode="query")] == ["q:rotat", "q:kei"]
    assert [t.text for t in chain("rotating keys", mode="index")] == ["rotat", "kei"]
