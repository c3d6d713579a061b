"""Tests for DenseIndex: dense-vector cosine search over chunks, from an embedder."""

from __future__ import annotations

import hashlib
import random
import re
import tempfile
import threading
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from knowledge_agent.analysis import TextAnalyzer
from knowledge_agent.backends.local.atomic_files import write_sealed
from knowledge_agent.backends.local.checksums import read_sealed_json
from knowledge_agent.backends.local.dense.index import (
    MAX_TEXT_CHARS,
    DenseIndex,
    chunk_text,
    item_text,
)
from knowledge_agent.backends.local.dense.store import stored_config
from knowledge_agent.errors import ConfigError, EmbeddingError, SearchIndexError
from knowledge_agent.models import KnowledgeChunk, KnowledgeItem
from knowledge_agent.search.analysed_batch import AnalysedBatch
from knowledge_agent.search.filters import SearchFilters

BASE_TIME = datetime(2024, 1, 1, tzinfo=timezone.utc)
WORDS = [
    *("river", "mountain", "forest", "cloud", "stone", "bridge", "market", "garden"),
    *("window", "harbor", "engine", "lantern", "violin", "castle", "meadow", "copper"),
]

Pair = tuple[KnowledgeItem, list[KnowledgeChunk]]


class FakeEmbedder:
    """Hashed bag of words → unit vector: deterministic, and texts sharing words are close."""

    def __init__(self, name: str = "fake:1", dimensions: int = 64) -> None:
        self._name = name
        self._dimensions = dimensions
        self.embedded: list[str] = []  # every text embedded as a document
        self.queries: list[str] = []

    @property
    def name(self) -> str:
        return self._name

    @property
    def dimensions(self) -> int:
        return self._dimensions

    def embed(self, texts: Sequence[str], *, kind: str = "document") -> np.ndarray:
        (self.queries if kind == "query" else self.embedded).extend(texts)
        return embed(texts, self._dimensions)


def embed(texts: Sequence[str], dimensions: int = 64) -> np.ndarray:
    out = np.zeros((len(texts), dimensions), np.float32)
    for i, text in enumerate(texts):
        for word in re.findall(r"\w+", text.lower()):
            h = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=8).digest(), "little")
            out[i, h % dimensions] += 1.0 if (h >> 32) & 1 else -1.0
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return (out / norms).astype(np.float32)


def make_item(
    item_id: str, texts: Sequence[str], *, title: str = "", heading: str = "", **fields: object
) -> Pair:
    content = "\n\n".join(texts)
    item = KnowledgeItem(id=item_id, title=title, content=content, **fields)  # type: ignore[arg-type]
    chunks, start = [], 0
    for index, text in enumerate(texts):
        chunks.append(
            KnowledgeChunk(
                id=f"{item_id}#{index}",
                item_id=item_id,
                chunk_index=index,
                content=text,
                heading=heading,
                start_position=start,
                end_position=start + len(text),
            )
        )
        start += len(text) + 2
    return item, chunks


def expected_chunks(
    pairs: dict[str, Pair], query: str, filters: SearchFilters | None = None
) -> dict[str, float]:
    """Brute force: every allowed chunk's cosine with the query."""
    q = embed([query])[0]
    found = {}
    for item, chunks in pairs.values():
        if filters is None or filters.matches(item):
            for chunk in chunks:
                found[chunk.id] = float(embed([chunk_text(chunk)])[0] @ q)
    return found


def expected_items(
    pairs: dict[str, Pair], query: str, filters: SearchFilters | None = None
) -> dict[str, float]:
    """Brute force: every allowed item's best row."""
    q = embed([query])[0]
    found = {}
    for item, chunks in pairs.values():
        if filters is None or filters.matches(item):
            texts = [chunk_text(chunk) for chunk in chunks] or [item_text(item)]
            found[item.id] = float(np.max(embed(texts) @ q))
    return found


def check_scores(hits: Sequence[object], expected: dict[str, float], top_k: int = 1000) -> None:
    """``hits`` are the best ``top_k`` positive scores of ``expected``, best first; a score
    within rounding of zero may be either way."""
    got = {getattr(hit, "chunk_id", None) or hit.item_id: hit.score for hit in hits}  # type: ignore[attr-defined]
    assert len(got) == len(hits)
    for key, score in got.items():
        assert score > 0 and score == pytest.approx(expected[key], abs=1e-5)
    scores = [hit.score for hit in hits]  # type: ignore[attr-defined]
    assert scores == sorted(scores, reverse=True)
    wanted = sorted((score for score in expected.values() if score > 1e-5), reverse=True)
    assert len(got) >= min(top_k, len(wanted))
    assert scores[: len(wanted)] == pytest.approx(wanted[:top_k], abs=1e-5)


def referenced_files(directory: Path) -> set[str]:
    manifest = read_sealed_json(directory / "manifest.json")
    return {
        f"{entry['name']}{suffix}"
        for entry in manifest["segments"]
        for suffix in (".vectors.npy", ".meta.npz")
    }


def segment_files(directory: Path) -> set[str]:
    return {path.name for path in directory.iterdir() if path.name.startswith("seg-")}


@pytest.fixture(params=["memory", "disk"])
def index_dir(request: pytest.FixtureRequest, tmp_path: Path) -> Path | None:
    return None if request.param == "memory" else tmp_path / "dense"


# -- round trips ---------------------------------------------------------------------------


def test_update_search_delete_round_trip(index_dir: Path | None) -> None:
    pairs = {
        "a": make_item("a", ["river bridge stone", "castle meadow"], heading="Guide > Rivers"),
        "b": make_item("b", ["violin lantern copper", "river harbor"]),
        "c": make_item("c", ["engine window garden"]),
    }
    with DenseIndex(index_dir, FakeEmbedder()) as index:
        index.update(list(pairs.values()))
        assert index.chunk_count() == 5 and index.item_count() == 3 and index.has_chunks()
        assert index.indexed_item_ids() == index.indexed_item_ids(chunks=True) == {"a", "b", "c"}
        for query in ("river bridge", "violin", "garden engine window", "castle"):
            hits = index.search_chunks(query, 10)
            check_scores(hits, expected_chunks(pairs, query))
            check_scores(index.search_items(query, 10), expected_items(pairs, query))
        top = index.search_chunks("river bridge stone", 1)[0]
        assert (top.chunk_id, top.item_id, top.chunk_index) == ("a#0", "a", 0)

        index.update(deletes=["a"])
        del pairs["a"]
        assert index.indexed_item_ids() == {"b", "c"} and index.chunk_count() == 3
        check_scores(
            index.search_chunks("river bridge", 10), expected_chunks(pairs, "river bridge")
        )

        pairs["b"] = make_item("b", ["meadow castle"])  # replacing drops the old chunks
        index.update_chunks_for_item(*pairs["b"])
        assert index.chunk_count() == 2
        assert {hit.chunk_id for hit in index.search_chunks("violin copper river", 10)} <= {"c#0"}
        check_scores(index.search_chunks("castle", 10), expected_chunks(pairs, "castle"))
        index.remove_chunks_for_item("c")
        assert index.indexed_item_ids() == {"b"}


def test_items_score_as_their_best_chunk_and_chunkless_items_have_a_row(
    index_dir: Path | None,
) -> None:
    with_chunks = make_item("a", ["river bridge", "violin copper lantern"])
    bare = KnowledgeItem(id="n", title="Harbor notes", content="harbor engine " * 3000)
    pairs = {"a": with_chunks, "n": (bare, [])}
    with DenseIndex(index_dir, FakeEmbedder()) as index:
        index.update(list(pairs.values()))
        assert index.item_count() == 2 and index.chunk_count() == 2
        assert index.indexed_item_ids(chunks=True) == {"a"}
        hits = index.search_items("violin", 5)
        assert hits[0].item_id == "a"
        assert hits[0].score == pytest.approx(index.search_chunks("violin", 1)[0].score)
        check_scores(index.search_items("harbor engine", 5), expected_items(pairs, "harbor engine"))
        # The item row never comes back as a chunk.
        assert all(hit.item_id != "n" for hit in index.search_chunks("harbor engine", 5))
    assert len(item_text(bare)) == MAX_TEXT_CHARS and item_text(bare).startswith("Harbor notes\n")


def test_chunk_text_is_heading_and_content() -> None:
    _, (chunk,) = make_item("a", ["body text"], heading="Title > Section")
    assert chunk_text(chunk) == "Title > Section\nbody text"
    _, (plain,) = make_item("b", ["body text"])
    assert chunk_text(plain) == "body text"


def test_only_new_rows_are_embedded(tmp_path: Path) -> None:
    embedder = FakeEmbedder()
    index = DenseIndex(tmp_path, embedder, batch_size=2)
    first = make_item("a", ["river bridge", "castle meadow", "violin copper"])
    index.update([first, make_item("b", ["river bridge"])])  # the same text twice: once
    assert len(embedder.embedded) == 3
    index.update([first])  # a replay embeds nothing and changes nothing visible
    assert len(embedder.embedded) == 3 and index.chunk_count() == 4
    edited = make_item("a", ["river bridge", "castle meadow garden", "violin copper"])
    index.update(AnalysedBatch.build(TextAnalyzer(), [edited]))  # an analysed batch too
    assert embedder.embedded[3:] == ["castle meadow garden"]
    assert index.search_chunks("garden", 1)[0].chunk_id == "a#1"
    index.close()
    # Vectors carried over survive a reopen.
    reopened = DenseIndex(tmp_path, FakeEmbedder())
    check_scores(
        reopened.search_chunks("violin copper", 10),
        expected_chunks({"a": edited, "b": make_item("b", ["river bridge"])}, "violin copper"),
    )


def test_upserted_and_deleted_in_one_call_ends_deleted(index_dir: Path | None) -> None:
    with DenseIndex(index_dir, FakeEmbedder()) as index:
        index.update([make_item("a", ["river"]), make_item("b", ["stone"])])
        index.update([make_item("a", ["river bridge"]), make_item("c", ["copper"])], ["a"])
        assert index.indexed_item_ids() == {"b", "c"}
        index.update([make_item("a", ["x"]), make_item("a", ["castle"])])  # the last wins
        assert [hit.chunk_id for hit in index.search_chunks("castle", 5)] == ["a#0"]
        assert index.chunk_count() == 3


def test_queries_that_find_nothing(index_dir: Path | None) -> None:
    embedder = FakeEmbedder()
    with DenseIndex(index_dir, embedder) as index:
        assert index.search_chunks("river", 5) == [] and embedder.queries == []  # empty index
        index.update([make_item("a", ["river bridge"])])
        for query in ("", "   ", "!!!"):
            assert index.search_chunks(query, 5) == []
            assert index.search_items(query, 5) == []
        assert index.search_chunks(None, 5) == []  # type: ignore[arg-type]
        assert index.search_chunks("river", 0) == []
        assert index.search_chunks("river", 5, min_similarity=float("nan"))
        assert index.search_chunks("river", 5, min_similarity=1.01) == []
        assert index.search_chunks("river", 5, min_similarity=0.5)[0].chunk_id == "a#0"
    with pytest.raises(SearchIndexError):
        index.search_chunks("river", 5)


def test_bad_arguments_and_a_bad_embedder(tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        DenseIndex(None, object())  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        DenseIndex(None, FakeEmbedder(), batch_size=0)
    with pytest.raises(ConfigError):
        DenseIndex(None, FakeEmbedder(dimensions=0))
    index = DenseIndex(tmp_path, FakeEmbedder())
    with pytest.raises(ConfigError):
        index.set_applied_seq(-1)
    index.update([make_item("a", ["river"])])

    class Broken(FakeEmbedder):
        def embed(self, texts: Sequence[str], *, kind: str = "document") -> np.ndarray:
            return np.zeros((len(texts) + 1, self.dimensions), np.float32)

    broken = DenseIndex(tmp_path, Broken())
    with pytest.raises(EmbeddingError):
        broken.update([make_item("b", ["stone"])], ["a"])
    assert broken.indexed_item_ids() == {"a"}  # nothing changed
    assert DenseIndex(tmp_path, FakeEmbedder()).indexed_item_ids() == {"a"}


# -- filters -------------------------------------------------------------------------------


def test_a_narrow_filter_still_returns_its_k_matches(index_dir: Path | None) -> None:
    pairs = [make_item(f"big{i}", ["river bridge stone castle"] * 2, kb="big") for i in range(300)]
    pairs += [
        make_item(f"small{i}", [f"river bridge {WORDS[i + 8]} {WORDS[i + 11]}"], kb="small")
        for i in range(3)
    ]
    with DenseIndex(index_dir, FakeEmbedder()) as index:
        index.update(pairs)
        assert {hit.item_id for hit in index.search_chunks("river bridge stone castle", 3)} <= {
            f"big{i}" for i in range(300)
        }
        only = SearchFilters.build(kb="small")
        hits = index.search_chunks("river bridge stone castle", 3, filters=only)
        assert sorted(hit.item_id for hit in hits) == ["small0", "small1", "small2"]
        items = index.search_items("river bridge stone castle", 3, filters=only)
        assert sorted(hit.item_id for hit in items) == ["small0", "small1", "small2"]
        assert index.search_chunks("river", 3, filters=SearchFilters.build(kb="none")) == []


def test_filters_match_search_filters_matches(index_dir: Path | None) -> None:
    rng = random.Random(7)
    pairs: dict[str, Pair] = {}
    for i in range(60):
        pairs[f"i{i}"] = make_item(
            f"i{i}",
            [" ".join(rng.choices(WORDS, k=6)) for _ in range(rng.randint(0, 3))],
            title=" ".join(rng.choices(WORDS, k=2)),
            kb=rng.choice(["default", "work", "notes"]),
            source_type=rng.choice(["file", "web", "text"]),
            doc_type=rng.choice(["", "guide", "faq"]),
            language=rng.choice(["", "en", "zh"]),
            source_uri=rng.choice([None, "/docs/a.md", "/docs/sub/b.md", "https://x.org/p"]),
            updated_at=BASE_TIME + timedelta(days=rng.randint(0, 30)),
        )
    cases = [
        SearchFilters.build(kb="work"),
        SearchFilters.build(kb=["work", "notes"], language="en"),
        SearchFilters.build(source_type="web", doc_type=["guide", ""]),
        SearchFilters.build(path_prefix="/docs/"),
        SearchFilters.build(path_glob="*/sub/*.md"),
        SearchFilters.build(path_prefix=["/docs/", "https://"], path_glob=["*.md", "*/sub/*"]),
        SearchFilters.build(path_prefix="https://", kb="default"),
        SearchFilters.build(updated_after=BASE_TIME + timedelta(days=10)),
        SearchFilters.build(
            updated_after="2024-01-05T00:00:00+00:00", updated_before=BASE_TIME + timedelta(days=20)
        ),
        SearchFilters.build(language="fr"),
        SearchFilters(),
    ]
    with DenseIndex(index_dir, FakeEmbedder()) as index:
        index.update(list(pairs.values())[:30])
        index.update(list(pairs.values())[30:])  # two segments
        for filters in cases:
            for query in ("river bridge", "violin copper meadow"):
                check_scores(
                    index.search_chunks(query, 1000, filters=filters),
                    expected_chunks(pairs, query, filters),
                )
                check_scores(
                    index.search_items(query, 1000, filters=filters),
                    expected_items(pairs, query, filters),
                )


# -- storage -------------------------------------------------------------------------------


def test_persistence_and_reopen(tmp_path: Path) -> None:
    pairs = {f"i{i}": make_item(f"i{i}", [f"{WORDS[i]} {WORDS[i + 1]} river"]) for i in range(8)}
    with DenseIndex(tmp_path, FakeEmbedder()) as index:
        assert not any(tmp_path.iterdir())  # opening never writes
        index.update(list(pairs.values()))
        index.update(deletes=["i3"])
        index.set_applied_seq(42)
        assert index.embedder_name == "fake:1"
    del pairs["i3"]
    embedder = FakeEmbedder()
    with DenseIndex(tmp_path, embedder) as reopened:
        assert reopened.applied_seq == 42 and embedder.embedded == []
        assert reopened.indexed_item_ids() == set(pairs)
        check_scores(reopened.search_chunks("river", 20), expected_chunks(pairs, "river"))
    config = stored_config(tmp_path)
    assert config is not None and (config["embedder"], config["dimensions"]) == ("fake:1", 64)
    assert segment_files(tmp_path) == referenced_files(tmp_path)


def test_a_second_instance_refreshes_to_anothers_writes(tmp_path: Path) -> None:
    writer = DenseIndex(tmp_path, FakeEmbedder())
    reader = DenseIndex(tmp_path, FakeEmbedder())
    assert reader.refresh() is False and reader.item_count() == 0
    writer.update([make_item("a", ["river bridge"])])
    assert reader.search_chunks("river", 5) == []  # a snapshot until refreshed
    assert reader.refresh() is True and reader.refresh() is False
    assert [hit.chunk_id for hit in reader.search_chunks("river", 5)] == ["a#0"]
    held = reader._collection.segments[0]
    writer.update([make_item("b", ["river stone"])])
    writer.set_applied_seq(7)
    assert reader.refresh() is True
    assert reader._collection.segments[0].vectors is held.vectors  # reused, not reloaded
    assert reader.applied_seq == 7 and reader.indexed_item_ids() == {"a", "b"}
    writer.update(deletes=["a"])
    assert reader.refresh() is True
    assert [hit.chunk_id for hit in reader.search_chunks("river", 5)] == ["b#0"]
    assert DenseIndex(None, FakeEmbedder()).refresh() is False


def test_merges_and_compaction_keep_the_rows_and_the_files_tidy(tmp_path: Path) -> None:
    index = DenseIndex(tmp_path, FakeEmbedder())
    index.max_segments = 3
    pairs: dict[str, Pair] = {}
    rng = random.Random(3)
    for step in range(25):
        item_id = f"i{rng.randint(0, 12)}"
        if step % 4 == 3:
            index.update(deletes=[item_id])
            pairs.pop(item_id, None)
        else:
            pairs[item_id] = make_item(item_id, [" ".join(rng.choices(WORDS, k=5))] * 2)
            index.update([pairs[item_id]])
        assert len(index._collection.segments) <= 3
    assert segment_files(tmp_path) == referenced_files(tmp_path)
    for seg in index._collection.segments:
        assert seg.n_dead <= 0.25 * seg.n_rows
    check_scores(index.search_chunks("river castle", 100), expected_chunks(pairs, "river castle"))
    reopened = DenseIndex(tmp_path, FakeEmbedder())
    check_scores(reopened.search_items("river castle", 100), expected_items(pairs, "river castle"))


def test_refit_replaces_everything(index_dir: Path | None) -> None:
    old = [make_item(f"old{i}", ["river bridge"]) for i in range(5)]
    new = {f"new{i}": make_item(f"new{i}", [f"castle {WORDS[i]}", "meadow"]) for i in range(9)}
    index = DenseIndex(index_dir, FakeEmbedder())
    index.max_segments = 2
    index.update(old)
    index.set_applied_seq(5)
    refit = index.refit()
    refit.add(list(new.values())[:3])
    refit.cancel()  # nothing changes
    assert index.indexed_item_ids() == {f"old{i}" for i in range(5)} and index.applied_seq == 5
    assert index.fit_chunks(iter(new.values())) == 18
    assert index.indexed_item_ids() == set(new) and index.applied_seq == 0
    assert all(hit.item_id in new for hit in index.search_chunks("river bridge", 50))
    check_scores(index.search_chunks("castle", 50), expected_chunks(new, "castle"))
    refit = index.refit()
    for pair in new.values():  # batch by batch, more segments than max_segments
        refit.add([pair])
    assert refit.finish() == 18
    if index_dir is not None:
        assert segment_files(index_dir) == referenced_files(index_dir)
        reopened = DenseIndex(index_dir, FakeEmbedder())
        assert reopened.indexed_item_ids() == set(new)
        refit = reopened.refit()
        refit.add(old)
        refit.cancel()  # the rebuild's files go with it
        assert segment_files(index_dir) == referenced_files(index_dir)


def test_another_embedder_is_refused(tmp_path: Path) -> None:
    with DenseIndex(tmp_path, FakeEmbedder()) as index:
        index.update([make_item("a", ["river"])])
    with pytest.raises(SearchIndexError, match="fake:2"):
        DenseIndex(tmp_path, FakeEmbedder(name="fake:2"))
    with pytest.raises(SearchIndexError, match="dimensions"):
        DenseIndex(tmp_path, FakeEmbedder(dimensions=32))
    assert stored_config(tmp_path)["embedder"] == "fake:1"  # type: ignore[index]
    assert stored_config(tmp_path / "nowhere") is None


@pytest.mark.parametrize(
    "damage",
    [
        "truncate vectors",
        "drop meta",
        "drop vectors",
        "bad manifest",
        "drop manifest",
        "evil name",
        "object array",
        "wrong rows",
        "float64 vectors",
    ],
)
def test_an_unreadable_directory_raises(tmp_path: Path, damage: str) -> None:
    with DenseIndex(tmp_path, FakeEmbedder()) as index:
        index.update([make_item("a", ["river bridge", "stone"])])
    vectors, meta = tmp_path / "seg-00000001.vectors.npy", tmp_path / "seg-00000001.meta.npz"
    manifest = tmp_path / "manifest.json"
    if damage == "truncate vectors":
        vectors.write_bytes(vectors.read_bytes()[:-9])
    elif damage == "drop meta":
        meta.unlink()
    elif damage == "drop vectors":
        vectors.unlink()
    elif damage == "bad manifest":
        manifest.write_text("{not json")
    elif damage == "drop manifest":
        manifest.unlink()
    elif damage == "evil name":
        data = read_sealed_json(manifest)  # resealed: the name is checked, not only the seal
        data["segments"][0]["name"] = "../seg-00000001"
        write_sealed(manifest, data)
    elif damage == "object array":
        with np.load(meta) as npz:
            arrays = {key: npz[key] for key in npz.files}
        arrays["keys"] = np.array([object(), object()], dtype=object)
        with open(meta, "wb") as fh:
            np.savez(fh, **arrays)  # a pickled array: must never be loaded
    elif damage == "wrong rows":
        data = read_sealed_json(manifest)
        data["segments"][0]["rows"] = 3
        write_sealed(manifest, data)
    elif damage == "float64 vectors":
        np.save(vectors, np.zeros((2, 64)))
    with pytest.raises(SearchIndexError):
        DenseIndex(tmp_path, FakeEmbedder())


def test_an_unreadable_new_generation_leaves_the_reader_as_it_was(tmp_path: Path) -> None:
    writer = DenseIndex(tmp_path, FakeEmbedder())
    writer.update([make_item("a", ["river"])])
    reader = DenseIndex(tmp_path, FakeEmbedder())
    writer.update([make_item("b", ["stone"])])
    (tmp_path / "seg-00000002.meta.npz").write_bytes(b"garbage")
    with pytest.raises(SearchIndexError):
        reader.refresh()
    assert reader.indexed_item_ids() == {"a"}


def test_searches_while_another_thread_updates(tmp_path: Path) -> None:
    index = DenseIndex(tmp_path, FakeEmbedder())
    index.update([make_item("base", ["river bridge"])])
    errors: list[BaseException] = []

    def search() -> None:
        try:
            for _ in range(40):
                assert index.search_chunks("river", 3)[0].item_id == "base"
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    thread = threading.Thread(target=search)
    thread.start()
    for i in range(20):
        index.update([make_item(f"i{i}", ["castle meadow"])])
    thread.join()
    assert errors == []


# -- the model -----------------------------------------------------------------------------

_ids = st.sampled_from([f"i{n}" for n in range(6)])
_text = st.lists(st.sampled_from(WORDS[:8]), min_size=0, max_size=4).map(" ".join)
_upsert = st.tuples(st.just("upsert"), _ids, st.lists(_text, max_size=3), _text)
_delete = st.tuples(st.just("delete"), _ids, st.just([]), st.just(""))
_refit = st.tuples(st.just("refit"), _ids, st.just([]), st.just(""))
_ops = st.lists(
    st.lists(st.one_of(_upsert, _upsert, _delete, _refit), min_size=1, max_size=3), max_size=8
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=_ops, on_disk=st.booleans(), query=_text)
def test_the_index_holds_exactly_the_surviving_chunks(
    ops: list[list[tuple[str, str, list[str], str]]], on_disk: bool, query: str
) -> None:
    with tempfile.TemporaryDirectory() as folder:
        index = DenseIndex(Path(folder) if on_disk else None, FakeEmbedder(), batch_size=2)
        index.max_segments = 2
        model: dict[str, Pair] = {}
        for batch in ops:
            upserts, deletes = [], []
            for op, item_id, texts, title in batch:
                if op == "upsert":
                    upserts.append(make_item(item_id, texts, title=title))
                elif op == "delete":
                    deletes.append(item_id)
            index.update(upserts, deletes)
            for item, chunks in upserts:
                model[item.id] = (item, chunks)
            for item_id in deletes:
                model.pop(item_id, None)
            if any(op == "refit" for op, *_ in batch):  # a rebuild from the model, in parts
                refit = index.refit()
                for pair in model.values():
                    refit.add([pair])
                assert refit.finish() == sum(len(chunks) for _, chunks in model.values())
        if (Path(folder) / "manifest.json").exists():
            assert segment_files(Path(folder)) == referenced_files(Path(folder))
        for current in [index, *([DenseIndex(Path(folder), FakeEmbedder())] if on_disk else [])]:
            assert current.indexed_item_ids() == set(model)
            assert current.indexed_item_ids(chunks=True) == {k for k, v in model.items() if v[1]}
            assert current.chunk_count() == sum(len(chunks) for _, chunks in model.values())
            assert current.item_count() == len(model)
            check_scores(current.search_chunks(query, 100), expected_chunks(model, query))
            check_scores(current.search_items(query, 100), expected_items(model, query))
            check_scores(current.search_items(query, 2), expected_items(model, query), 2)
            check_scores(current.search_chunks(query, 1), expected_chunks(model, query), 1)
            current.close()


# -- a real model --------------------------------------------------------------------------


def test_wordllama_ranks_a_paraphrase_above_an_unrelated_chunk(tmp_path: Path) -> None:
    pytest.importorskip("wordllama")
    from knowledge_agent.embeddings import WordLlamaEmbedder

    embedder = WordLlamaEmbedder(cache_dir=tmp_path / "cache")
    with DenseIndex(tmp_path / "dense", embedder) as index:
        index.update(
            [
                make_item("secret", ["Steps to change a forgotten login secret"]),
                make_item("weather", ["Tomorrow brings heavy rain over the northern coast"]),
                make_item("cooking", ["Simmer the tomatoes with garlic for twenty minutes"]),
            ]
        )
        hits = index.search_chunks("How do I reset my password?", 3)
        assert hits[0].item_id == "secret"
        assert index.embedder_name == embedder.name
