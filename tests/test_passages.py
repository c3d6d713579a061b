"""Passage evidence, document evidence and the confidence of a result."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from knowledge_agent import KnowledgeAgentCore
from knowledge_agent.analysis import TextAnalyzer
from knowledge_agent.errors import QueryError
from knowledge_agent.search.ranking.expansion import expanded_query
from knowledge_agent.search.ranking.passages import (
    PassageEvidence,
    confidence,
    passage_evidence,
    units,
    unseen_share,
)

ANALYZER = TextAnalyzer()

# tldr pages (CC BY 4.0), as they are written: mnemonic brackets inside the words.
PAGES = {
    "tar": """# tar

> Archiving utility.
> Often combined with a compression method, such as `gzip` or `bzip2`.

- [c]reate an archive and write it to a [f]ile:

`tar cf {{path/to/target.tar}} {{path/to/file1 path/to/file2 ...}}`

- E[x]tract a (compressed) archive [f]ile into the current directory [v]erbosely:

`tar xvf {{path/to/source.tar[.gz|.bz2|.xz]}}`

- E[x]tract a (compressed) archive [f]ile into the target directory:

`tar xf {{path/to/source.tar[.gz|.bz2|.xz]}} {{[-C|--directory]}} {{path/to/directory}}`
""",
    "unzip": """# unzip

> Extract files/directories from ZIP archives.

- Extract all files/directories from specific archives into the current directory:

`unzip {{path/to/archive1.zip path/to/archive2.zip ...}}`

- Extract files/directories from archives to a specific path:

`unzip {{path/to/archive1.zip path/to/archive2.zip ...}} -d {{path/to/output}}`

- Extract a compressed file into a target directory, listing each file:

`unzip -v {{path/to/archive.zip}} -d {{path/to/directory}}`
""",
    "dtrx": """# dtrx

> An intelligent archive extraction tool.

- Extract an archive into the current directory:

`dtrx {{path/to/archive}}`

- Extract an archive quietly into the current directory:

`dtrx {{[-q|--quiet]}} {{path/to/archive}}`
""",
    "pax": """# pax

> Archiving and copying utility.

- Extract a compressed archive into the current directory:

`pax -r -z -f {{path/to/archive.tar.gz}}`

- Copy files into a target directory, keeping the archive file untouched:

`pax -rw {{path/to/file}} {{path/to/target_directory}}`
""",
}


@pytest.fixture(scope="module")
def pages() -> Iterator[KnowledgeAgentCore]:
    with KnowledgeAgentCore() as core:
        for name, text in PAGES.items():
            core.add_text(text, title=name, source_uri=f"pages/{name}.md")
        yield core


def evidence(query: str, text: str) -> PassageEvidence:
    terms = ANALYZER.terms(query)
    return passage_evidence(terms, text, dict.fromkeys(terms, 1.0), ANALYZER)


# -- units and evidence ---------------------------------------------------------------------


def test_units_are_lines_and_sentences() -> None:
    text = "- First item:\n\n`cmd one`\n\nA sentence here. Another one! Last"
    assert [text[s:e].strip() for s, e in units(text)] == [
        "- First item:",
        "`cmd one`",
        "A sentence here.",
        "Another one!",
        "Last",
    ]


def test_the_line_holding_the_query_gives_full_evidence() -> None:
    found = evidence("restart the nginx service", "- List units\n\n- Restart the nginx service:")
    assert (found.coverage, found.proximity) == (1.0, 1.0)


def test_scattered_words_cover_the_query_but_are_not_near() -> None:
    found = evidence(
        "restart nginx service", "Restart everything, then nginx, then wait, and stop each service."
    )
    assert found.coverage == 1.0 and found.proximity == 0.0


def test_overlapping_cjk_bigrams_are_not_pairs() -> None:
    # Within one run, nearness of its bigrams is coverage already; separate words pair up.
    run = evidence("如何重置密码", "如何重置密码。")
    assert (run.coverage, run.proximity) == (1.0, 0.0)
    words = evidence("重置 密码", "请重置密码。")
    assert (words.coverage, words.proximity) == (1.0, 1.0)


def test_evidence_counts_query_terms_by_idf() -> None:
    terms = ANALYZER.terms("rare common")
    found = passage_evidence(terms, "common words only", {"rare": 3.0, "common": 1.0}, ANALYZER)
    assert found.coverage == pytest.approx(0.25)


def test_a_term_the_idf_does_not_know_weighs_nothing() -> None:
    terms = ANALYZER.terms("kernel zebra")
    found = passage_evidence(terms, "the kernel boots", {"kernel": 2.0}, ANALYZER)
    assert found.coverage == pytest.approx(1.0)
    unknown = passage_evidence(terms, "the kernel boots", {}, ANALYZER)
    assert unknown == PassageEvidence(0.0, 0.0, 0, 0), "no weight at all: no evidence"


@given(st.text(max_size=80), st.text(max_size=300))
def test_evidence_and_confidence_stay_within_0_and_1(query: str, text: str) -> None:
    found = evidence(query, text)
    assert 0 <= found.coverage <= 1 and 0 <= found.proximity <= 1
    assert 0 <= found.start <= found.end <= len(text)
    for share in (None, -1.0, 0.0, 0.4, 7.0):
        assert 0 <= confidence(share, found) <= 1
    assert 0 <= confidence(0.5, None) <= 1


# -- ranking --------------------------------------------------------------------------------


def test_a_page_that_says_it_in_one_line_ranks_first(pages: KnowledgeAgentCore) -> None:
    query = "Extract a compressed archive file into the target directory"
    results = pages.search(query, limit=4)
    assert results[0].item.title == "tar"
    best = results[0].matched_chunks[0].content
    assert results[0].explanation is not None
    start, end = results[0].explanation.details["passage_span"]
    line = "- E[x]tract a (compressed) archive [f]ile into the target directory:"
    assert best[start:end].strip() == line


def test_passage_evidence_is_part_of_the_score() -> None:
    with KnowledgeAgentCore(search_config={"coverage_weight": 0, "proximity_weight": 0}) as core:
        for name, text in PAGES.items():
            core.add_text(text, title=name)
        plain = core.search("Extract a compressed archive file into the target directory")
    details = plain[0].explanation.details if plain[0].explanation else {}
    assert details["passage_bonus"] == 0


# -- confidence -----------------------------------------------------------------------------


def test_an_unrelated_question_has_a_low_confidence(pages: KnowledgeAgentCore) -> None:
    good = pages.search("extract an archive into the current directory")[0].confidence
    unrelated = pages.search("what is the weather like in paris and how do I bake a cake")
    assert good > 0.5
    assert all(result.confidence < 0.3 for result in unrelated)
    # Words the base does not have at all count against it.
    assert pages.search("weather in paris and the archive", min_confidence=0.5) == []
    kept = pages.search("extract an archive into the current directory", min_confidence=0.5)
    assert kept and all(result.confidence >= 0.5 for result in kept)


def test_confidence_at_item_level_is_the_share_of_the_best_bm25(
    pages: KnowledgeAgentCore,
) -> None:
    results = pages.search("extract archive directory", level="item")
    assert results and all(0 < result.confidence <= 1 for result in results)
    assert results == sorted(results, key=lambda result: -result.relevance_score)


def test_words_the_base_never_saw_shrink_the_confidence_by_their_share() -> None:
    found = PassageEvidence(0.5, 0.25, 0, 10)
    assert confidence(0.6, found, 0.25) == pytest.approx(confidence(0.6, found) * 0.75)
    assert confidence(0.6, None, 0.5) == pytest.approx(0.3)
    assert confidence(None, found, 1.0) == 0.0
    idf = {"known": 1.0, "novel": 3.0}
    assert unseen_share(["known", "novel", "novel"], idf, {"novel"}) == pytest.approx(6 / 7)
    assert unseen_share(["known"], idf, set()) == 0.0
    assert unseen_share(["如何", "known"], {"如何": 3.0, "known": 1.0}, {"如何"}) == 0.0


@pytest.mark.parametrize("level", ["chunk", "item"])
def test_a_question_about_something_the_base_never_saw_is_less_sure(
    pages: KnowledgeAgentCore, level: str
) -> None:
    asked = pages.search("extract an archive into the target directory", level=level)[0]
    # Nearly the same words, but the question is about a kubernetes thing.
    other = pages.search("extract an archive into the kubernetes directory", level=level)[0]
    assert pages.keyword_index.unseen(["kubernet", "archiv"]) == {"kubernet"}
    assert other.confidence < asked.confidence * 0.8
    # Take the unseen word's share away and the confidence is what the match alone says.
    terms = pages.analyzer.terms("extract an archive into the kubernetes directory")
    idf = pages.keyword_index.idf(terms, items=level == "item")
    share = unseen_share(terms, idf, {"kubernet"})
    pages.keyword_index.unseen = lambda terms, items=False: set()  # type: ignore[method-assign]
    try:
        blind = pages.search("extract an archive into the kubernetes directory", level=level)[0]
    finally:
        del pages.keyword_index.unseen
    assert other.confidence == pytest.approx(blind.confidence * (1 - share))


@pytest.mark.parametrize("bad", [-0.1, 1.5])
def test_min_confidence_out_of_range_is_refused(pages: KnowledgeAgentCore, bad: float) -> None:
    with pytest.raises(QueryError, match="min_confidence"):
        pages.search("archive", min_confidence=bad)


# -- query expansion (RM3, opt-in) ----------------------------------------------------------


def test_expanded_query_keeps_the_query_and_adds_the_first_hits_words() -> None:
    feedback = [(2.0, ["wing", "flutter", "flutter", "panel"]), (1.0, ["wing", "buckle"])]
    weights = expanded_query(["wing", "load"], feedback, 2, 0.5)
    assert weights["wing"] == 1.0 and weights["load"] == 1.0
    assert set(weights) == {"wing", "load", "flutter", "panel"}  # the two strongest new words
    # The added words share as much weight as the query's own (original weight 0.5).
    assert sum(weights.values()) == pytest.approx(4.0)
    assert expanded_query(["wing"], [], 5, 0.5) == {"wing": 1.0}


def test_a_widened_query_reaches_a_page_that_shares_only_the_topic() -> None:
    texts = {
        "a": "Aeroelastic flutter of thin panels at supersonic speed; panel flutter boundaries.",
        "b": "Panel flutter boundaries were measured for thin panels in the wind tunnel.",
        "c": "Boundaries of supersonic flutter for thin plates.",
        "d": "Cooking pasta in salted boiling water.",
    }

    def found(config: dict[str, object]) -> list[str]:
        with KnowledgeAgentCore(search_config=config) as core:
            for name, text in texts.items():
                core.add_text(text, title=name)
            results = core.search("aeroelastic panels problems", limit=4)
            return [result.item.title for result in results]

    assert "c" not in found({})
    widened = found({"expansion_terms": 5, "expansion_gate": 1.0, "expansion_min_terms": 1})
    assert "c" in widened and "d" not in widened
    # Gated by language like the dense ranking: a query read as another language is not widened.
    gated = {"expansion_terms": 5, "expansion_gate": 1.0, "expansion_min_terms": 1}
    assert "c" not in found({**gated, "expansion_languages": ["zh"]})
    assert "c" in found({**gated, "expansion_languages": []})


def test_semantic_mode_takes_no_keyword_document_evidence(pages: KnowledgeAgentCore) -> None:
    hybrid = pages.search("extract an archive into the current directory")[0].explanation
    semantic = pages.search("extract an archive into the current directory", mode="semantic")
    assert hybrid is not None and hybrid.details["document_bonus"] > 0
    assert semantic and all(
        r.explanation is not None and r.explanation.details["document_bonus"] == 0 for r in semantic
    )
