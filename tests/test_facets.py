"""Per-scope counts of a search's matches (documents per kb, doc type and source type,
before the limit): the API on both backends, ``search --facets`` and the MCP tools."""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from knowledge_agent import KnowledgeAgentCore
from knowledge_agent.analysis import TextAnalyzer
from knowledge_agent.cli import cli
from knowledge_agent.models import KnowledgeItem, SearchFacets
from knowledge_agent.protocols import Storage
from knowledge_agent.server import mcp_tools as tools
from knowledge_agent.tokens import estimate_tokens

# (kb, doc type, source type, text)
CORPUS = [
    ("ops", "runbook", "markdown", "Rotate the signing keys every quarter."),
    ("ops", "runbook", "markdown", "Restart the queue workers after a deploy."),
    ("ops", "", "text", "Keys for the staging vault live in the safe."),
    ("dev", "adr", "markdown", "We rotate API keys with a cron job."),
    ("dev", "", "code", "def rotate(keys): return keys[1:] + keys[:1]"),
    ("dev", "adr", "markdown", "Caching HTTP responses with ETags."),
]


def _add(core: KnowledgeAgentCore) -> dict[str, str]:
    ids = {}
    for n, (kb, doc_type, source_type, text) in enumerate(CORPUS):
        item = core.add_text(
            text, title=f"note {n}", kb=kb, doc_type=doc_type, source_type=source_type
        )
        ids[text] = item.id
    return ids


@pytest.fixture(params=["local", "postgresql"])
def kb(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[KnowledgeAgentCore]:
    if request.param == "local":
        core = KnowledgeAgentCore(tmp_path / "kb")
    else:
        core = KnowledgeAgentCore(backend=request.getfixturevalue("postgres_server").new_database())
    with core:
        yield core


def test_facets_count_every_matching_document_before_the_limit(kb: KnowledgeAgentCore) -> None:
    ids = _add(kb)
    assert len(kb.search("rotate keys", limit=1)) == 1
    facets = kb.facets("rotate keys")
    assert facets == SearchFacets(
        total=4,
        kb={"dev": 2, "ops": 2},
        doc_type={"": 2, "adr": 1, "runbook": 1},
        source_type={"markdown": 2, "code": 1, "text": 1},
    )
    assert kb.facets("rotate keys", kb="ops", doc_type="runbook").to_dict() == {
        "total": 1,
        "kb": {"ops": 1},
        "doc_type": {"runbook": 1},
        "source_type": {"markdown": 1},
    }
    kb.delete_knowledge_item(ids["We rotate API keys with a cron job."])
    assert kb.facets("rotate keys").kb == {"ops": 2, "dev": 1}
    assert kb.facets("the of and") == SearchFacets()  # no searchable term, nothing matches


WORDS = ["alpha", "beta", "gamma", "delta", "密码", "重置", "keys", "the"]


@settings(max_examples=40)
@given(
    documents=st.lists(
        st.tuples(
            st.sampled_from(["a", "b", "c"]),
            st.sampled_from(["", "adr", "runbook"]),
            st.lists(st.sampled_from(WORDS), min_size=1, max_size=6).map(" ".join),
        ),
        min_size=1,
        max_size=12,
    ),
    query=st.lists(st.sampled_from(WORDS), min_size=1, max_size=3).map(" ".join),
    limit=st.integers(1, 3),
)
def test_facets_are_the_documents_holding_a_query_term(
    documents: list[tuple[str, str, str]], query: str, limit: int
) -> None:
    with KnowledgeAgentCore() as core:
        for kb_name, doc_type, text in documents:
            core.add_text(text, kb=kb_name, doc_type=doc_type)
        analyzer = TextAnalyzer()
        wanted = set(analyzer.terms(query))
        matching = [d for d in documents if wanted & set(analyzer.terms(d[2]))]
        facets = core.facets(query)
        assert facets.total == len(matching)
        assert facets.kb == dict(Counter(d[0] for d in matching))
        assert facets.doc_type == dict(Counter(d[1] for d in matching))
        for counts in (facets.kb, facets.doc_type, facets.source_type):
            assert sum(counts.values()) == facets.total
            assert list(counts.values()) == sorted(counts.values(), reverse=True)
        # A search finds nothing the facets do not count.
        assert len(core.search(query, limit=limit)) <= min(limit, facets.total)


def test_the_grouped_count_counts_each_stored_document_once(backend_storage: Storage) -> None:
    # More ids than one SQLite statement takes, ids asked twice, and ids never stored.
    rng = random.Random(7)
    with backend_storage.write_group("facet items"):
        for n in range(1_203):
            backend_storage.save_item(
                KnowledgeItem(
                    id=f"item-{n}",
                    title=f"note {n}",
                    content=f"text {n}",
                    kb=rng.choice(["ops", "dev", "知识"]),
                    doc_type=rng.choice(["", "adr", "runbook"]),
                    source_type=rng.choice(["markdown", "code", "text"]),
                )
            )
    stored = [f"item-{n}" for n in range(1_203)]
    asked = [*stored[::2], *stored[::3], "missing-1", "missing-2"]
    groups = backend_storage.facet_groups(asked)
    assert len({group[:3] for group in groups}) == len(groups)  # one row per triple
    facts = backend_storage.item_facts(asked).values()
    assert len(facts) == len(set(stored[::2]) | set(stored[::3]))
    assert SearchFacets.from_groups(groups) == SearchFacets.count(facts)
    assert backend_storage.facet_groups([]) == []
    assert backend_storage.facet_groups(["missing-1"]) == []


@given(
    groups=st.lists(
        st.tuples(
            st.sampled_from(["a", "b", "c"]),
            st.sampled_from(["", "adr"]),
            st.sampled_from(["code", "text"]),
            st.integers(1, 5),
        ),
        max_size=8,
    )
)
def test_facets_from_groups_add_up_each_groups_documents(
    groups: list[tuple[str, str, str, int]],
) -> None:
    facets = SearchFacets.from_groups(groups)
    assert facets.total == sum(group[3] for group in groups)
    for position, counts in enumerate((facets.kb, facets.doc_type, facets.source_type)):
        expected: Counter[str] = Counter()
        for group in groups:
            expected[group[position]] += group[3]
        assert counts == dict(expected)
        # Most first, ties by value.
        assert list(counts) == sorted(counts, key=lambda value: (-counts[value], value))


def test_search_facets_on_the_command_line(tmp_path: Path) -> None:
    data = ["--data-dir", str(tmp_path / "kb")]
    runner = CliRunner()
    for n, (kb_name, _, _, text) in enumerate(CORPUS[:4]):
        (tmp_path / f"{n}.md").write_text(f"# Note {n}\n\n{text}\n", encoding="utf-8")
        done = runner.invoke(cli, [*data, "add", str(tmp_path / f"{n}.md"), "--kb", kb_name])
        assert done.exit_code == 0, done.output
    shown = runner.invoke(cli, [*data, "search", "rotate keys", "-n", "1", "--facets", "--json"])
    assert shown.exit_code == 0, shown.output
    answer = json.loads(shown.output)
    assert len(answer["results"]) == 1
    assert answer["facets"] == {
        "total": 3,
        "kb": {"ops": 2, "dev": 1},
        "doc_type": {"": 3},
        "source_type": {"markdown": 3},
    }
    text = runner.invoke(cli, [*data, "search", "rotate keys", "--facets"])
    assert text.exit_code == 0
    assert "matches          3 documents" in text.output
    assert "knowledge base   ops 2, dev 1" in text.output
    assert "doc type         (none) 3" in text.output
    plain = runner.invoke(cli, [*data, "search", "rotate keys", "--json"])
    assert "facets" not in json.loads(plain.output)
    refused = runner.invoke(cli, [*data, "search", "rotate keys", "--facets", "--format", "md"])
    assert refused.exit_code == 2 and "--facets works with the text and --json" in refused.output


def test_the_mcp_search_tools_count_facets_within_the_budget(core: KnowledgeAgentCore) -> None:
    _add(core)
    answer = tools.search_knowledge(core, "rotate keys", limit=1, facets=True)
    assert answer["count"] == 1 and answer["facets"] == core.facets("rotate keys").to_dict()
    assert "facets" not in tools.search_knowledge(core, "rotate keys")
    code = tools.search_code(core, "rotate keys", facets=True)["facets"]
    assert code == {"total": 1, "kb": {"dev": 1}, "doc_type": {"": 1}, "source_type": {"code": 1}}
    docs = tools.search_docs(core, "rotate keys", kb="ops", facets=True)["facets"]
    assert docs["total"] == 2 and docs["source_type"] == {"markdown": 1, "text": 1}
    tight = tools.search_knowledge(core, "rotate keys", limit=5, facets=True, max_tokens=500)
    assert estimate_tokens(tools.dumps(tight)) <= 500 and tight["facets"]["total"] == 4
