"""Dense vectors as a third ranking: fused, explained, kept in step, rebuilt on a new embedder."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from knowledge_agent import KnowledgeAgentCore
from knowledge_agent.errors import EmbeddingError, QueryError

# Words a fake "model" treats as the same meaning: what a paraphrase needs.
SYNONYMS = {"password": "secret", "reset": "change", "forgotten": "lost", "login": "secret"}


class FakeEmbedder:
    """Hashed bag of words with a few synonyms folded together; unit rows."""

    dimensions = 64

    def __init__(self, name: str = "fake:1", *, broken: bool = False) -> None:
        self.name = name
        self.broken = broken
        self.embedded = 0

    def embed(self, texts: Sequence[str], *, kind: str = "document") -> np.ndarray:
        if self.broken and kind == "query":
            raise EmbeddingError("fake://", "service down")
        self.embedded += len(texts)
        rows = np.zeros((len(texts), self.dimensions), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in re.findall(r"\w+", text.lower()):
                word = SYNONYMS.get(word, word)
                rows[row, hashlib.sha256(word.encode()).digest()[0] % self.dimensions] += 1
        norms = np.linalg.norm(rows, axis=1, keepdims=True)
        return np.divide(rows, norms, out=np.zeros_like(rows), where=norms > 0)


ACCOUNT = "Steps to change a lost secret: open the settings page and follow the recovery link."
CAT = "The cat sat on the mat all afternoon, watching the birds in the garden."


def fill(core: KnowledgeAgentCore) -> None:
    core.add_text(ACCOUNT, title="Account recovery")
    core.add_text(CAT, title="Cat")


def test_a_paraphrase_is_found_by_the_dense_ranking_and_explained() -> None:
    with KnowledgeAgentCore(embedder=FakeEmbedder()) as core:
        fill(core)
        found = core.search("how do I reset my forgotten password", mode="dense")
        assert found and found[0].item.title == "Account recovery"
        explained = found[0].explanation
        assert explained.dense_score > 0 and explained.dense_rank == 1
        assert explained.details["dense"] == "fake:1"
        hybrid = core.search("reset forgotten password settings zeppelin")
        assert hybrid[0].item.title == "Account recovery"
        assert hybrid[0].explanation.dense_rank == 1
    with KnowledgeAgentCore() as plain:
        fill(plain)
        with pytest.raises(QueryError, match="embedder"):
            plain.search("x", mode="dense")
        assert plain.search("cat")[0].explanation.dense_score is None


def test_deletes_reach_the_dense_index_and_a_failing_embedder_leaves_it_out() -> None:
    embedder = FakeEmbedder()
    with KnowledgeAgentCore(embedder=embedder) as core:
        fill(core)
        gone = core.search("cat mat", limit=1)[0].item.id
        core.delete_knowledge_item(gone)
        assert all(r.item.id != gone for r in core.search("cat mat garden birds", mode="dense"))
        embedder.broken = True
        still = core.search("settings page recovery zeppelin")
        assert still[0].item.title == "Account recovery"  # keyword and TF-IDF answered
        assert still[0].explanation.dense_rank is None


def test_an_embedder_set_later_or_changed_embeds_every_chunk_once(tmp_path: Path) -> None:
    data = tmp_path / "kb"
    with KnowledgeAgentCore(data) as core:
        fill(core)
        chunks = core.storage.count_chunks()
    first = FakeEmbedder("fake:1")
    with KnowledgeAgentCore(data, embedder=first) as core:
        assert core.keyword_index.item_count() == 2
        dense = core._backend.engine.dense_index
        assert dense is not None and dense.chunk_count() == chunks
        assert first.embedded == chunks
        assert core.search("reset forgotten password", mode="dense")[0].item.title.startswith("A")
    again = FakeEmbedder("fake:1")
    with KnowledgeAgentCore(data, embedder=again) as core:
        assert again.embedded == 0  # the vectors on disk are used as they are
    other = FakeEmbedder("fake:2")
    with KnowledgeAgentCore(data, embedder=other) as core:
        dense = core._backend.engine.dense_index
        assert dense is not None and dense.embedder_name == "fake:2"
        assert other.embedded == chunks and dense.chunk_count() == chunks


def test_embedding_again_on_open_reports_its_progress(tmp_path: Path, monkeypatch) -> None:
    from knowledge_agent.backends.local import shared_indexes

    monkeypatch.setattr(shared_indexes, "_STATUS_MIN_CHUNKS", 1)  # any size is "long" here
    data = tmp_path / "kb"
    with KnowledgeAgentCore(data) as core:
        fill(core)
        chunks = core.storage.count_chunks()
    said: list[str] = []
    with KnowledgeAgentCore(data, embedder=FakeEmbedder(), on_status=said.append):
        pass
    assert said and said[-1] == f"indexing: {chunks:,} of {chunks:,} chunks"


def test_a_project_file_turns_embeddings_on(tmp_path: Path, monkeypatch) -> None:
    from click.testing import CliRunner

    from knowledge_agent.cli import cli

    (tmp_path / ".knowledge-agent.toml").write_text(
        'data_dir = "kb"\n[embeddings]\nprovider = "nonesuch"\n', "utf-8"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("KNOWLEDGE_AGENT_HOME", raising=False)
    (tmp_path / "notes.md").write_text("# Notes\n\nSomething.\n", "utf-8")
    result = CliRunner().invoke(cli, ["add", "notes.md"])
    assert result.exit_code == 1 and "nonesuch" in result.output


def test_wordllama_finds_a_paraphrase_with_no_shared_words() -> None:
    pytest.importorskip("wordllama")
    with KnowledgeAgentCore(embedder={"provider": "wordllama"}) as core:
        core.add_text("Steps to change a forgotten login secret.", title="Account")
        core.add_text("The cat sat on the mat all afternoon.", title="Cat")
        core.add_text("Quarterly revenue grew by four percent.", title="Finance")
        assert core.search("How do I reset my password?", mode="dense")[0].item.title == "Account"


def test_a_query_in_a_language_the_embedder_does_not_know_skips_the_dense_ranking() -> None:
    english_only = FakeEmbedder()
    english_only.languages = ("en",)  # type: ignore[attr-defined]
    with KnowledgeAgentCore(embedder=english_only) as core:
        fill(core)
        core.add_text("账户找回：打开设置页面，按照恢复链接操作。", title="账户")
        chinese = core.search("如何找回账户 设置 恢复")[0].explanation
        assert chinese.dense_score is None and "dense" not in chinese.details
        english = core.search("reset forgotten password settings zeppelin")[0].explanation
        assert english.dense_rank == 1
        asked = core.search("账户 恢复", mode="dense")  # asked for by name: still runs
        assert asked and asked[0].explanation.details["dense"] == "fake:1"


def test_dense_passage_weight_adds_the_meaning_of_a_passage_to_its_score() -> None:
    # Two sections of one guide: one has the query's word, one says what the query means.
    words = "Password: the word password, listed in a glossary of terms and their spelling."
    meaning = "Change a lost secret from the settings page by following the recovery link."
    guide = f"# Guide\n\n## Glossary\n\n{words}\n\n## Recovery\n\n{meaning}"
    query = "forgotten password"
    config = {"min_chunk_size": 20, "max_chunk_size": 120}
    off = {"known_item_share": 0}  # a known-item query is ranked by keywords alone
    with KnowledgeAgentCore(embedder=FakeEmbedder(), chunk_config=config) as core:
        core.add_text(guide, title="Guide")
        lexical = core.search(query, limit=1, options={**off, "dense_passage_weight": 0})[0]
        mixed = core.search(query, limit=1, options={**off, "dense_passage_weight": 30})[0]
    assert words in lexical.matched_chunks[0].content
    assert meaning in mixed.matched_chunks[0].content
    for chunk in mixed.matched_chunks:
        explained = chunk.explanation
        assert explained.details["dense_bonus"] == pytest.approx(30 * explained.dense_score)
    assert "dense_bonus" not in lexical.matched_chunks[0].explanation.details


def test_a_dense_passage_weight_without_dense_evidence_leaves_the_fusion_as_it_is() -> None:
    # No embedder: nothing to add, so the fused scores keep the engines' order (which the
    # grouping's stable sort keeps for ties) rather than being sorted again.
    fused = {"keyword-first": 0.2, "semantic-only": 0.5}
    with KnowledgeAgentCore(search_config={"dense_passage_weight": 30}) as core:
        kept = core.engine._with_dense_evidence(fused, {})
        added = core.engine._with_dense_evidence(fused, {"keyword-first": 0.1})
    assert list(kept.items()) == list(fused.items())
    assert list(added) == ["keyword-first", "semantic-only"]
    assert added["keyword-first"] == pytest.approx(0.2 + 30 * 0.1)
