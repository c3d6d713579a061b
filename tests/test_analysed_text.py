"""A text analysed once gives every use what analysing it again would: unit terms, passage
evidence, highlights and matched-term counts."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from knowledge_agent.analysis import TextAnalyzer, highlight, highlight_terms
from knowledge_agent.search.ranking.analysed import AnalysedText, TextAnalyses
from knowledge_agent.search.ranking.explain import FieldMatches
from knowledge_agent.search.ranking.passages import passage_evidence, units

ANALYZER = TextAnalyzer()

# Pieces that meet at unit ends in every way the tokenizer can see: sentence ends, line
# breaks, CJK full stops, dotted names, versions, markup inside words, code punctuation.
PIECES = [
    "tar",
    "archive",
    "files",
    "running",
    "os.path.join",
    "v1.2.3",
    "E[x]tract",
    "[c]reate",
    "**E**xtract",
    "args[0]",
    "[ch]",
    "*",
    "数据库",
    "如何安装",
    "。",
    "！",
    "．",
    ".",
    ". ",
    "? ",
    "; ",
    "\n",
    "\n\n",
    " ",
    "  ",
    "-",
    "`",
    "café",
    "naïve",
    "the",
    "a",
    "x",
]
TEXTS = st.lists(st.sampled_from(PIECES), max_size=60).map("".join) | st.text(max_size=200)
QUERIES = st.lists(st.sampled_from(PIECES), min_size=1, max_size=8).map(" ".join)


@settings(max_examples=300)
@given(TEXTS)
def test_spans_are_the_terms_with_their_source_spans(text: str) -> None:
    spans = ANALYZER.spans(text)
    assert [term for term, _, _ in spans] == ANALYZER.terms(text)
    assert spans == [(t.text, t.start, t.end) for t in ANALYZER.tokens(text)]


@settings(max_examples=300)
@given(TEXTS)
def test_a_units_terms_are_those_of_the_unit_analysed_alone(text: str) -> None:
    analysed = AnalysedText(text, ANALYZER)
    for start, end in units(text):
        assert analysed.unit_terms(start, end) == ANALYZER.terms(text[start:end])


@settings(max_examples=300)
@given(QUERIES, TEXTS)
def test_passage_evidence_is_the_same_from_an_analysed_text(query: str, text: str) -> None:
    terms = ANALYZER.terms(query)
    idf = {term: 1.0 + (len(term) % 3) for term in terms}
    expected = passage_evidence(terms, text, idf, ANALYZER)
    assert passage_evidence(terms, text, idf, ANALYZER, AnalysedText(text, ANALYZER)) == expected


@settings(max_examples=200)
@given(QUERIES, TEXTS)
def test_highlight_and_matched_terms_are_the_same_from_an_analysed_text(
    query: str, text: str
) -> None:
    terms = ANALYZER.terms(query)
    analysed = AnalysedText(text, ANALYZER)
    marked = highlight_terms(terms, ANALYZER)
    assert highlight(text, marked, ANALYZER, spans=analysed.spans) == highlight(
        text, marked, ANALYZER
    )
    fields = {"title": "Archive files", "content": text}
    plain = FieldMatches(ANALYZER, terms, fields)
    known = FieldMatches(ANALYZER, terms, fields, {"content": analysed.terms})
    assert known.terms("title", "content") == plain.terms("title", "content")
    assert known.fields() == plain.fields()


def test_a_marked_texts_unit_is_analysed_alone() -> None:
    # Whole, the text is tokenized with the marked-word pattern; its first line, alone, is
    # not, and "args[0]x" reads differently.
    text = "call args[0]x now\nE[x]tract the files"
    analysed = AnalysedText(text, ANALYZER)
    assert analysed.marked
    (first, _), *_ = units(text)
    assert analysed.unit_terms(0, first) == ANALYZER.terms(text[:first])


def test_each_text_is_analysed_once_a_query() -> None:
    analyses = TextAnalyses(ANALYZER)
    first = analyses("Extract the archive files.")
    assert analyses("Extract the archive files.") is first
    assert analyses("Another text.") is not first
