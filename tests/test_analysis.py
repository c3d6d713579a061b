"""Tests for knowledge_agent.analysis: one tokenizer for Whoosh, TF-IDF and queries."""

from __future__ import annotations

import copy
import itertools
import pickle
import re
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from whoosh import fields, qparser
from whoosh.analysis import Analyzer

from knowledge_agent.analysis import (
    _HAN,
    _HANGUL,
    _KANA,
    DEFAULT_STOP_WORDS,
    AnalyzerConfig,
    TextAnalyzer,
    Token,
    WhooshTextAnalyzer,
    detect_language,
    highlight,
    matched_spans,
)
from knowledge_agent.backends.local.keyword.storage import PrivateRamStorage
from knowledge_agent.errors import ConfigError


@pytest.fixture(scope="module")
def analyzer() -> TextAnalyzer:
    return TextAnalyzer()


# --------------------------------------------------------------------------- CJK


def test_cjk_run_gives_overlapping_bigrams(analyzer: TextAnalyzer) -> None:
    assert analyzer.terms("如何重置密码") == ["如何", "何重", "重置", "置密", "密码"]


def test_single_cjk_character_is_a_unigram(analyzer: TextAnalyzer) -> None:
    assert analyzer.terms("好") == ["好"]
    assert analyzer.terms("第3章") == ["第", "3", "章"]


def test_cjk_punctuation_splits_runs(analyzer: TextAnalyzer) -> None:
    assert analyzer.terms("你好，世界。") == ["你好", "世界"]


def test_mixed_script_splits_cjk_out_of_latin(analyzer: TextAnalyzer) -> None:
    assert analyzer.terms("Python教程") == ["python", "教程"]
    assert analyzer.terms("用Python写HTTP服务器") == ["用", "python", "写", "http", "服务", "务器"]


def test_japanese_and_korean_runs_are_bigrammed(analyzer: TextAnalyzer) -> None:
    assert analyzer.terms("東京に") == ["東京", "京に"]
    assert analyzer.terms("한국어 텍스트") == ["한국", "국어", "텍스", "스트"]


def test_cjk_is_not_stemmed_or_length_filtered() -> None:
    strict = TextAnalyzer(AnalyzerConfig(min_length=3))
    assert strict.terms("好 重置") == ["好", "重置"]
    assert strict.terms("go golang") == ["golang"]


# --------------------------------------------------------------------------- Latin words


def test_lowercase_and_stopwords_removed(analyzer: TextAnalyzer) -> None:
    assert analyzer.terms("The Cat and THE hat") == ["cat", "hat"]


def test_stopword_only_and_blank_text_give_nothing(analyzer: TextAnalyzer) -> None:
    assert analyzer.terms("the and of to") == []
    assert analyzer.terms("") == []
    assert analyzer.terms(" \n\t ...!? ") == []


def test_stemming_conflates_inflections(analyzer: TextAnalyzer) -> None:
    run = analyzer.terms("run")
    assert run == ["run"]
    assert analyzer.terms("running") == run
    assert analyzer.terms("runs") == run
    assert analyzer.terms("Running") == run


def test_stemming_can_be_disabled() -> None:
    plain = TextAnalyzer(AnalyzerConfig(stem=False))
    assert plain.terms("running runs") == ["running", "runs"]


def test_custom_stopwords_are_casefolded() -> None:
    custom = TextAnalyzer(AnalyzerConfig(stopwords={"Foo"}, stem=False))
    assert custom.terms("foo the bar") == ["the", "bar"]


def test_length_limits_drop_words() -> None:
    limited = TextAnalyzer(AnalyzerConfig(min_length=2, max_length=5, stem=False))
    assert limited.terms("x yy zzzzz wwwwww") == ["yy", "zzzzz"]


def test_numbers_are_kept(analyzer: TextAnalyzer) -> None:
    assert analyzer.terms("in 1973 prices rose 400") == ["1973", "price", "rose", "400"]


def test_unicode_words_are_folded_not_mangled(analyzer: TextAnalyzer) -> None:
    assert analyzer.terms("Straße") == ["strass"]
    assert analyzer.terms("Привет") == ["привет"]
    # combining marks stay inside the word; decomposed text matches precomposed text
    assert analyzer.terms("हिन्दी") == ["हिन्दी"]
    assert analyzer.terms("cafe\u0301") == analyzer.terms("café")
    # fullwidth ASCII is read as ASCII
    assert analyzer.terms("ＰＹＴＨＯＮ") == ["python"]


# --------------------------------------------------------------------------- identifiers


def test_camel_case_identifier_keeps_whole_and_parts(analyzer: TextAnalyzer) -> None:
    terms = analyzer.terms("getUserName")
    assert terms == ["getusername", "getusernam", "get", "user", "name"]
    assert {"getusername", "get", "user", "name"} <= set(terms)


def test_lowercase_spelling_of_identifier_meets_it(analyzer: TextAnalyzer) -> None:
    # "getusername" typed in a query is a plain word, hence stemmed; the identifier in a
    # document carries that stem as well as its exact folded form.
    [query_term] = analyzer.terms("getusername")
    assert query_term in analyzer.terms("getUserName")
    assert analyzer.terms("runningtasks")[0] in analyzer.terms("runningTasks")


# --------------------------------------------------------------------------- markup in words


def test_mnemonic_brackets_do_not_cut_words(analyzer: TextAnalyzer) -> None:
    marked = "E[x]tract a (compressed) archive [f]ile into the target directory"
    assert analyzer.terms(marked) == analyzer.terms(
        "Extract a compressed archive file into the target directory"
    )
    assert analyzer.terms("[f]or[w]ar[d]s e[xp]i[r]ation") == analyzer.terms("forwards expiration")


def test_bold_inside_a_word_does_not_cut_it(analyzer: TextAnalyzer) -> None:
    assert analyzer.terms("**E**xtract and re**move**d") == analyzer.terms("Extract and removed")


def test_a_marked_word_spans_its_markup(analyzer: TextAnalyzer) -> None:
    text = "Lis[t] then E[x]tract"
    spans = [(token.text, text[token.start : token.end]) for token in analyzer.tokens(text)]
    assert ("extract", "E[x]tract") in spans


def test_indexes_globs_and_products_stay_apart(analyzer: TextAnalyzer) -> None:
    # Markup joins a word only where a word character follows it.
    assert analyzer.terms("args[0] list[str]") == analyzer.terms("args 0 list str")
    assert analyzer.terms("m*n x * y") == ["m", "n", "x", "y"]
    assert analyzer.terms("- [x] done") == analyzer.terms("x done")


@given(
    st.text(alphabet="abcdefghijklmnopqrstuvwxyz", min_size=3, max_size=12),
    st.data(),
)
def test_a_bracketed_letter_run_inside_a_word_is_the_word(word: str, data: st.DataObject) -> None:
    analyzer = TextAnalyzer()
    start = data.draw(st.integers(0, len(word) - 2))
    end = data.draw(st.integers(start + 1, len(word) - 1))  # a letter follows the bracket
    marked = f"{word[:start]}[{word[start:end]}]{word[end:]}"
    assert analyzer.terms(f"see {marked} here") == analyzer.terms(f"see {word} here")


def test_snake_case_identifier(analyzer: TextAnalyzer) -> None:
    assert analyzer.terms("snake_case_name") == ["snake_case_name", "snake", "case", "name"]


def test_acronym_identifier(analyzer: TextAnalyzer) -> None:
    assert analyzer.terms("HTTPServer") == ["httpserver", "http", "server"]
    assert analyzer.terms("XMLHttpRequest") == ["xmlhttprequest", "xml", "http", "request"]


def test_identifier_whole_is_unstemmed_but_parts_are_stemmed(analyzer: TextAnalyzer) -> None:
    assert analyzer.terms("runningTasks") == ["runningtasks", "runningtask", "run", "task"]


def test_identifier_parts_drop_stopwords(analyzer: TextAnalyzer) -> None:
    assert analyzer.terms("getTheName")[-2:] == ["get", "name"]


def test_dotted_names(analyzer: TextAnalyzer) -> None:
    assert analyzer.terms("os.path.join") == ["os.path.join", "os", "path", "join"]
    assert analyzer.terms("request.getUserName()") == [
        "request.getusername",
        "request",
        "getusername",
        "getusernam",
        "get",
        "user",
        "name",
    ]


def test_exact_identifier_query_matches_inside_dotted_name(analyzer: TextAnalyzer) -> None:
    assert "getusername" in analyzer.terms("self.getUserName()")


def test_digit_boundaries_split(analyzer: TextAnalyzer) -> None:
    assert analyzer.terms("utf8") == ["utf8", "utf", "8"]


def test_plain_words_are_not_duplicated(analyzer: TextAnalyzer) -> None:
    assert analyzer.terms("running NASA Python") == ["run", "nasa", "python"]
    assert analyzer.terms("APIs") == ["api"]  # a plural acronym is one word
    assert analyzer.terms("_emphasis_ __init__") == analyzer.terms("emphasis init")


def test_hex_hash_is_not_split(analyzer: TextAnalyzer) -> None:
    assert analyzer.terms("3f2a9b7c1d0e5f6a") == ["3f2a9b7c1d0e5f6a"]


def test_long_blob_is_dropped_but_long_snake_name_keeps_parts(analyzer: TextAnalyzer) -> None:
    assert analyzer.terms("aGVsbG8gd29ybGQhIFRoaXMgaXMgYSBsb25nIGJhc2U2NCBibG9iIG9mIGRhdGEu") != []
    assert analyzer.terms("aGVsbG8" * 20) == []
    name = "test_that_the_user_can_reset_the_password_when_the_token_has_expired"
    assert len(name) > 64
    terms = analyzer.terms(name)
    assert name not in terms
    assert {"user", "reset", "password", "token", "expir"} <= set(terms)


def test_identifier_splitting_can_be_disabled() -> None:
    plain = TextAnalyzer(AnalyzerConfig(split_identifiers=False))
    assert plain.terms("getUserName snake_case") == ["getusernam", "snake_case"]


# --------------------------------------------------------------------------- tokens


def test_tokens_carry_source_spans_and_positions(analyzer: TextAnalyzer) -> None:
    text = "Resetting getUserName: 如何重置密码"
    tokens = list(analyzer.tokens(text))
    assert [t.text for t in tokens] == analyzer.terms(text)
    assert [t.position for t in tokens] == list(range(len(tokens)))
    spans = [(t.text, text[t.start : t.end]) for t in tokens]
    assert spans == [
        ("reset", "Resetting"),
        ("getusername", "getUserName"),
        ("getusernam", "getUserName"),
        ("get", "get"),
        ("user", "User"),
        ("name", "Name"),
        ("如何", "如何"),
        ("何重", "何重"),
        ("重置", "重置"),
        ("置密", "置密"),
        ("密码", "密码"),
    ]
    assert isinstance(tokens[0], Token)


def test_tokens_offsets_skip_underscores(analyzer: TextAnalyzer) -> None:
    text = "call __init__ now"
    [token] = [t for t in analyzer.tokens(text) if t.text == "init"]
    assert text[token.start : token.end] == "init"


# --------------------------------------------------------------------------- configuration


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"stem": "yes"}, "stem"),
        ({"cjk": "unigram"}, "cjk"),
        ({"split_identifiers": 1}, "split_identifiers"),
        ({"min_length": 0}, "min_length"),
        ({"min_length": True}, "min_length"),
        ({"max_length": "64"}, "max_length"),
        ({"min_length": 5, "max_length": 3}, "max_length"),
        ({"stopwords": "the"}, "stopwords"),
        ({"stopwords": {"ok", 3}}, "stopwords"),
    ],
)
def test_invalid_config_raises_config_error_naming_the_field(kwargs: dict, field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        AnalyzerConfig(**kwargs)


def test_config_is_keyword_only_frozen_and_comparable() -> None:
    with pytest.raises(TypeError):
        AnalyzerConfig(True)  # type: ignore[misc]
    config = AnalyzerConfig()
    with pytest.raises(AttributeError):
        config.stem = False  # type: ignore[misc]
    assert config.stopwords == DEFAULT_STOP_WORDS
    assert config == AnalyzerConfig(stopwords=set(DEFAULT_STOP_WORDS))
    assert hash(config) == hash(AnalyzerConfig())
    assert AnalyzerConfig.from_dict(config.to_dict()) == config
    assert AnalyzerConfig.from_dict({**config.to_dict(), "future_option": 1}) == config


def test_text_analyzer_rejects_non_config() -> None:
    with pytest.raises(ConfigError):
        TextAnalyzer({"stem": False})  # type: ignore[arg-type]


def test_jieba_missing_raises_config_error_with_install_hint(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "jieba", None)  # makes `import jieba` fail
    with pytest.raises(ConfigError, match=r'pip install "knowledge-agent\[cjk\]"'):
        TextAnalyzer(AnalyzerConfig(cjk="jieba"))


def test_jieba_segmentation_when_installed() -> None:
    pytest.importorskip("jieba")
    seg = TextAnalyzer(AnalyzerConfig(cjk="jieba"))
    text = "如何重置密码"
    terms = seg.terms(text)
    assert "密码" in terms
    assert terms == [t.text for t in seg.tokens(text)]
    assert all(text[t.start : t.end] == t.text for t in seg.tokens(text))


def test_analyzer_pickles_as_config_and_keeps_working(analyzer: TextAnalyzer) -> None:
    analyzer.terms("warm the cache with some words")
    clone = pickle.loads(pickle.dumps(analyzer))
    assert clone == analyzer
    assert clone.terms("getUserName 重置密码") == analyzer.terms("getUserName 重置密码")
    assert copy.deepcopy(analyzer) == analyzer


def test_non_str_input(analyzer: TextAnalyzer) -> None:
    assert analyzer.terms(None) == []  # type: ignore[arg-type]
    assert analyzer.terms("密码".encode()) == ["密码"]  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        analyzer.terms(42)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- Whoosh


def test_whoosh_analyzer_matches_terms_with_positions_and_offsets(
    analyzer: TextAnalyzer,
) -> None:
    whoosh_analyzer = analyzer.whoosh_analyzer()
    assert isinstance(whoosh_analyzer, Analyzer)
    text = "The HTTPServer is running: 如何重置密码 in os.path.join"
    got = [
        (t.text, t.pos, t.startchar, t.endchar)
        for t in whoosh_analyzer(text, positions=True, chars=True, mode="index")
    ]
    assert [g[0] for g in got] == analyzer.terms(text)
    assert [g[1] for g in got] == list(range(len(got)))
    assert [(g[2], g[3]) for g in got] == [(t.start, t.end) for t in analyzer.tokens(text)]
    assert text[got[0][2] : got[0][3]] == "HTTPServer"
    # without offsets (the indexing path) the terms and positions are the same
    plain = [(t.text, t.pos) for t in whoosh_analyzer(text, positions=True)]
    assert plain == [(g[0], g[1]) for g in got]


def test_whoosh_analyzer_honours_start_pos_start_char_and_tokenize(
    analyzer: TextAnalyzer,
) -> None:
    whoosh_analyzer = analyzer.whoosh_analyzer()
    tokens = [
        (t.text, t.pos, t.startchar, t.endchar, t.original)
        for t in whoosh_analyzer(
            "Big cats", positions=True, chars=True, start_pos=10, start_char=100, keeporiginal=True
        )
    ]
    assert tokens == [("big", 10, 100, 103, "Big"), ("cat", 11, 104, 108, "cats")]
    [single] = [t.text for t in whoosh_analyzer("Running", tokenize=False, removestops=False)]
    assert single == "running"  # prefix / wildcard text: folded, not stemmed


def test_whoosh_analyzer_equality_and_pickle(analyzer: TextAnalyzer) -> None:
    whoosh_analyzer = analyzer.whoosh_analyzer()
    assert whoosh_analyzer == WhooshTextAnalyzer(AnalyzerConfig())
    assert whoosh_analyzer != WhooshTextAnalyzer(AnalyzerConfig(stem=False))
    clone = pickle.loads(pickle.dumps(whoosh_analyzer, protocol=pickle.HIGHEST_PROTOCOL))
    assert clone == whoosh_analyzer
    assert [t.text for t in clone("getUserName")] == analyzer.terms("getUserName")


def _schema(analyzer: TextAnalyzer) -> fields.Schema:
    return fields.Schema(
        id=fields.ID(stored=True, unique=True),
        content=fields.TEXT(analyzer=analyzer.whoosh_analyzer(), phrase=True),
    )


def test_whoosh_index_finds_chinese_substring_query(analyzer: TextAnalyzer) -> None:
    schema = _schema(analyzer)
    index = PrivateRamStorage().create_index(schema)
    with index.writer() as writer:
        writer.add_document(id="zh", content="如何重置密码？请打开设置页面。")
        writer.add_document(id="en", content="The HTTPServer handles getUserName requests.")
        writer.add_document(id="other", content="天气预报 weather forecast")
    parser = qparser.QueryParser("content", schema, group=qparser.OrGroup)
    with index.searcher() as searcher:
        hits = searcher.search(parser.parse("重置密码"), limit=5)
        assert [hit["id"] for hit in hits][:1] == ["zh"]
        hits = searcher.search(parser.parse("user name"), limit=5)
        assert [hit["id"] for hit in hits] == ["en"]
        hits = searcher.search(parser.parse("getusername"), limit=5)
        assert [hit["id"] for hit in hits] == ["en"]
        hits = searcher.search(parser.parse('"重置密码"'), limit=5)  # phrase of bigrams
        assert [hit["id"] for hit in hits] == ["zh"]


def test_whoosh_schema_survives_pickle_round_trip(analyzer: TextAnalyzer) -> None:
    schema = _schema(analyzer)
    restored = pickle.loads(pickle.dumps(schema, protocol=pickle.HIGHEST_PROTOCOL))
    assert restored == schema
    assert isinstance(restored["content"].analyzer, WhooshTextAnalyzer)
    index = PrivateRamStorage().create_index(restored)
    with index.writer() as writer:
        writer.add_document(id="zh", content="如何重置密码")
    parser = qparser.QueryParser("content", restored, group=qparser.OrGroup)
    with index.searcher() as searcher:
        assert [hit["id"] for hit in searcher.search(parser.parse("重置密码"))] == ["zh"]


def test_whoosh_index_reopened_from_storage_reads_schema(analyzer: TextAnalyzer) -> None:
    storage = PrivateRamStorage()
    index = storage.create_index(_schema(analyzer))
    with index.writer() as writer:
        writer.add_document(id="a", content="Resetting passwords")
    reopened = storage.open_index()  # the schema is unpickled from the TOC
    assert reopened.schema["content"].analyzer == analyzer.whoosh_analyzer()
    parser = qparser.QueryParser("content", reopened.schema)
    with reopened.searcher() as searcher:
        assert [hit["id"] for hit in searcher.search(parser.parse("reset password"))] == ["a"]


# --------------------------------------------------------------------------- scikit-learn


def test_tfidf_vectorizer_uses_the_analyzer(analyzer: TextAnalyzer) -> None:
    from sklearn.feature_extraction.text import HashingVectorizer, TfidfVectorizer

    docs = ["如何重置密码", "The server is running", "getUserName returns the name"]
    vectorizer = TfidfVectorizer(analyzer=analyzer)
    matrix = vectorizer.fit_transform(docs)
    vocabulary = vectorizer.vocabulary_
    assert {"重置", "密码", "run", "server", "getusername", "name"} <= set(vocabulary)
    assert matrix.shape == (3, len(vocabulary))
    query = vectorizer.transform(["重置密码"])
    scores = (matrix @ query.T).toarray().ravel()
    assert scores.argmax() == 0 and scores[0] > 0
    hashed = HashingVectorizer(analyzer=analyzer, n_features=2**10).transform(docs)
    assert hashed.shape == (3, 2**10)
    assert hashed[0].nnz == 5


# --------------------------------------------------------------------------- language


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("如何重置密码", "zh"),
        ("用Python写一个HTTP服务器", "zh"),
        ("東京に行きます", "ja"),
        ("한국어 텍스트입니다", "ko"),
        ("Hello world, this is English", "en"),
        ("This paragraph is English and quotes one word: 密码", "en"),
        ("12345 !!! ---", ""),
        ("", ""),
        ("Привет мир", ""),
    ],
)
def test_detect_language(text: str, expected: str) -> None:
    assert detect_language(text) == expected


def _language_by_definition(text: str) -> str:
    """detect_language's rules, each count a regex pass over the whole sample."""
    sample = text[:20_000]

    def count(chars: str) -> int:
        return len(re.findall(f"[{chars}]", sample))

    letters = len(re.findall(r"[^\W\d_]", sample))
    if not letters:
        return ""
    han, kana, hangul = count(_HAN), count(_KANA), count(_HANGUL)
    cjk = han + kana + hangul
    other = letters - cjk
    if cjk and cjk * 4 >= other:
        return "ko" if hangul > han + kana else "ja" if kana * 20 >= cjk else "zh"
    latin = count("A-Za-z\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u024f")
    return "en" if latin * 2 > other else ""


_SCRIPTS = st.sampled_from(list("aZéßжΩ密码のカ한ㄱ7_ 。!\u0301"))


@given(st.lists(st.tuples(_SCRIPTS, st.integers(1, 30)), max_size=12) | st.text(max_size=80))
@settings(max_examples=300)
def test_detect_language_counts_as_its_rules_say(runs: list[tuple[str, int]] | str) -> None:
    text = runs if isinstance(runs, str) else "".join(char * n for char, n in runs)
    assert detect_language(text) == _language_by_definition(text)


def test_detect_language_reads_only_the_first_20000_characters() -> None:
    assert detect_language("x" * 20_000 + "密码" * 10_000) == "en"
    assert detect_language("!" * 20_000 + "hello") == ""


# --------------------------------------------------------------------------- highlight


def test_highlight_marks_original_spans(analyzer: TextAnalyzer) -> None:
    text = "Running the server: the servers are running."
    snippet = highlight(text, set(analyzer.terms("run server")), analyzer)
    assert snippet == "**Running** the **server**: the **servers** are **running**."


def test_highlight_accepts_raw_query_words(analyzer: TextAnalyzer) -> None:
    assert highlight("The cats sat", {"cat"}, analyzer) == "The **cats** sat"


def test_highlight_merges_cjk_bigrams(analyzer: TextAnalyzer) -> None:
    snippet = highlight("如何重置密码？", set(analyzer.terms("重置密码")), analyzer)
    assert snippet == "如何**重置密码**？"


def test_highlight_windows_the_densest_cluster(analyzer: TextAnalyzer) -> None:
    filler = "lorem ipsum dolor sit amet " * 40
    text = filler + "reset the password here " + filler + "password once more " + filler
    snippet = highlight(text, set(analyzer.terms("reset password")), analyzer, max_chars=80)
    assert "**reset** the **password**" in snippet
    assert snippet.startswith("…") and snippet.endswith("…")
    body = snippet.replace("**", "").strip("…")
    assert len(body) <= 80
    assert body in text
    assert text[text.index(body) - 1] == " "  # cut at a word boundary
    assert text[text.index(body) + len(body)] == " "


def test_highlight_without_match_returns_start(analyzer: TextAnalyzer) -> None:
    text = "alpha beta gamma delta epsilon"
    assert highlight(text, {"zeta"}, analyzer, max_chars=14) == "alpha beta…"
    assert highlight(text, set(), analyzer) == text
    assert highlight("", {"x"}, analyzer) == ""


def test_highlight_custom_marker(analyzer: TextAnalyzer) -> None:
    assert highlight("a getUserName call", {"user"}, analyzer, marker=("<b>", "</b>")) == (
        "a get<b>User</b>Name call"
    )


@settings(max_examples=200, deadline=None)
@given(
    text=st.text(st.sampled_from(list("ab cd重置密码 getUserName.")), max_size=80).map(
        lambda inner: f"({inner})"  # highlight trims what it cuts at the ends
    ),
    query=st.sampled_from(["ab", "cd ab", "重置", "user", "name ab"]),
)
def test_matched_spans_are_what_highlight_marks(text: str, query: str) -> None:
    analyzer = TextAnalyzer()
    spans = matched_spans(text, [query], analyzer)
    marked, cursor = [], 0
    for start, end in spans:
        marked += [text[cursor:start], "<", text[start:end], ">"]
        cursor = end
    whole = highlight(text, [query], analyzer, marker=("<", ">"), max_chars=len(text) + 1)
    assert whole == "".join([*marked, text[cursor:]])
    assert all(a < b <= c for (a, b), (c, _) in itertools.pairwise(spans))


# --------------------------------------------------------------------------- robustness


def test_never_raises_on_hostile_text(analyzer: TextAnalyzer) -> None:
    hostile = "\x00\x01\ud800\udfff 🎉❤️ \u200b\ufeff" + "a" * 10_000 + " 重置" * 3
    assert analyzer.terms(hostile) == ["重置"] * 3
    big = ("Lorem ipsum getUserName 如何重置密码 ∑ 3.14. " * 3000)[:100_000]
    assert len(analyzer.terms(big)) > 10_000
    assert list(analyzer.tokens(big))


_TEXT = st.text(alphabet=st.characters(codec=None, exclude_categories=()), max_size=200) | st.text(
    alphabet=st.sampled_from(list("aZ_.0 9Éé重置密码かカ한\u0301\u093f\u200b\ud800🎉\n\t-ＡＢ")),
    max_size=60,
)


@settings(max_examples=200, deadline=None)
@given(_TEXT)
def test_terms_never_raise_and_are_clean(text: str) -> None:
    terms = TextAnalyzer().terms(text)
    assert isinstance(terms, list)
    for term in terms:
        assert isinstance(term, str) and term
        assert not any(ch.isspace() for ch in term)


@settings(max_examples=200, deadline=None)
@given(_TEXT)
def test_tokens_offsets_are_inside_and_ordered(text: str) -> None:
    analyzer = TextAnalyzer()
    tokens = list(analyzer.tokens(text))
    assert [t.text for t in tokens] == analyzer.terms(text)
    previous = 0
    for index, token in enumerate(tokens):
        assert 0 <= token.start < token.end <= len(text)
        assert token.start >= previous
        assert token.position == index
        previous = token.start


@settings(max_examples=200, deadline=None)
@given(_TEXT)
def test_whoosh_analyzer_agrees_with_terms(text: str) -> None:
    analyzer = TextAnalyzer()
    whoosh_analyzer = analyzer.whoosh_analyzer()
    assert [t.text for t in whoosh_analyzer(text, chars=True)] == analyzer.terms(text)
    assert [t.text for t in whoosh_analyzer(text, positions=True)] == analyzer.terms(text)


@given(st.text(st.characters(max_codepoint=127), max_size=120))
@settings(max_examples=400)
def test_ascii_texts_are_tokenized_as_by_the_unicode_word_pattern(text: str) -> None:
    from knowledge_agent.analysis import _ASCII_TOKEN_RE, _TOKEN_RE

    assert _ASCII_TOKEN_RE.findall(text) == _TOKEN_RE.findall(text)
    words = "getUserName os.path.join a_b __init__ 3.14 x.y. .z runs Running" + text
    analyzer = TextAnalyzer()
    assert analyzer.terms(words) == [span[0] for span in analyzer.spans(words)]


@given(
    st.lists(
        st.sampled_from(["self", "_x", "getName", "os", "path2", "a", "__", "HTTPError"]),
        min_size=1,
        max_size=4,
    ),
    st.booleans(),
)
def test_dotted_names_give_the_terms_of_their_segments_analysed_afresh(
    segments: list[str], split: bool
) -> None:
    # Segments are remembered across tokens: a segment's terms and offsets must not depend on
    # the name it was first seen in.
    config = AnalyzerConfig(split_identifiers=split)
    name = ".".join(segments)
    warm = TextAnalyzer(config)
    warm.spans(" ".join(reversed(segments)) + " " + ".".join(reversed(segments)))
    got = warm.spans(name)
    fresh = TextAnalyzer(config)
    fresh._segment_cache.clear()
    fresh._spans_cache.clear()
    assert got == fresh.spans(name)
    for _term, start, end in got:
        assert 0 <= start < end <= len(name)
