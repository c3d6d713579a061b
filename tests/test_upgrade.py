"""A data folder written by the previous release opens without rebuilding or embedding
anything again: its indexes are upgraded in place (the sums of their files recorded, their
manifests and state file sealed), answer as they did, and real damage in one of them is
still found.

``tests/data/legacy-base/`` is such a folder, written by the previous release (commit
9f574d8, before index files carried checksums) and committed as it came out, with
``answers.json``: what that release answered to the queries below. It was made with::

    git worktree add /tmp/ka-old 9f574d8
    PYTHONPATH=/tmp/ka-old:tests python make_legacy_base.py tests/data/legacy-base
    rm tests/data/legacy-base/write.lock tests/data/legacy-base/index/whoosh/*/MAIN_WRITELOCK

where ``make_legacy_base.py`` is::

    import json, sys
    from pathlib import Path
    from embedding_server import EmbeddingServer
    from knowledge_agent import KnowledgeAgentCore

    QUERIES = [("tok3 harbour", "hybrid"), ("beacon pier", "keyword"), ("ferry", "semantic"),
               ("tok5 ferry", "dense"), ("tide tables", "hybrid")]
    GUIDE = "".join(f"## Part {p}\\n\\n" + f"Tide tables of part {p} for the harbour pilots. "
                    * 30 + "\\n\\n" for p in range(3))
    out = Path(sys.argv[1])
    with EmbeddingServer() as server:
        embedder = {"provider": "openai", "base_url": server.base_url, "model": "m"}
        with KnowledgeAgentCore(out, embedder=embedder, workers=1) as core:
            for n in range(6):
                text = f"Note tok{n} about the harbour and ferry {n}.\\n" * 3
                core.add_text(text, title=f"note {n}")
        with KnowledgeAgentCore(out, embedder=embedder, workers=1) as core:
            core.add_text("A lighthouse beacon on the pier.\\n" * 3, title="beacon")
            core.add_text(GUIDE, title="guide")
            core.delete_knowledge_item(core.search("tok2", mode="keyword")[0].item.id)
            answers = {
                f"{mode}: {query}": [[r.item.title, r.relevance_score] for r in
                                     core.search(query, mode=mode, limit=5, context_window=0)]
                for query, mode in QUERIES
            }
    (out / "answers.json").write_text(json.dumps(answers, indent=1) + "\\n")

So every index has two segments and dead rows. A committed folder rather than a new one's
files rewritten into the old forms: it holds that release's own bytes (its database too),
so the tests cannot share a misreading of the old formats with the code they test, and
they need no git history. Its dense index names the embedder it was made with, reached
then at another port: :class:`SameEmbedder` carries that name and asks this run's loopback
server (``tests/embedding_server.py``), which records every text it embeds.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import zlib
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from embedding_server import EmbeddingServer
from files import another_writer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from knowledge_agent import KnowledgeAgentCore
from knowledge_agent.backends.local.checksums import VerifiedFiles, read_json_file, read_sealed_json
from knowledge_agent.backends.local.dense.store import verify_dense_folder
from knowledge_agent.backends.local.keyword.index import SearchIndexManager, verify_keyword_folder
from knowledge_agent.backends.local.keyword.state import read_state
from knowledge_agent.backends.local.segments import store as segment_store
from knowledge_agent.backends.local.tfidf.index import SemanticSearcher
from knowledge_agent.backends.local.tfidf.store import verify_tfidf_folder
from knowledge_agent.embeddings import OpenAIEmbedder
from knowledge_agent.errors import DamagedIndexError

LEGACY = Path(__file__).parent / "data" / "legacy-base"
EXPECTED: dict[str, list[list]] = json.loads((LEGACY / "answers.json").read_text())
QUERIES = [tuple(key.split(": ", 1)[::-1]) for key in EXPECTED]  # (query, mode)
HINT = "knowledge-agent check --repair"
REBUILT = re.compile(r"build|embedding \d+ chunks")  # every rebuild and fit logs one of these
SEALED_LATER = {"index/whoosh/state.json", "index/tfidf/manifest.json", "index/dense/manifest.json"}


class SameEmbedder(OpenAIEmbedder):
    """The embedder the legacy base was made with: the loopback server's model, under the
    name the base's dense index records."""

    @property
    def name(self) -> str:
        manifest = json.loads((LEGACY / "index" / "dense" / "manifest.json").read_bytes())
        return str(manifest["config"]["embedder"])


@pytest.fixture(scope="module")
def service() -> Iterator[EmbeddingServer]:
    with EmbeddingServer() as server:
        yield server


@pytest.fixture
def embeddings(service: EmbeddingServer) -> EmbeddingServer:
    """The loopback embedding server, its record of requests empty."""
    service.requests.clear()
    return service


@pytest.fixture
def kb(tmp_path: Path) -> Path:
    """A copy of the previous release's data folder."""
    return Path(shutil.copytree(LEGACY, tmp_path / "kb"))


def open_core(kb: Path, server: EmbeddingServer, **options: object) -> KnowledgeAgentCore:
    embedder = SameEmbedder(server.base_url, "m", dimensions=64, api_key_env=None)
    return KnowledgeAgentCore(kb, embedder=embedder, workers=1, **options)  # type: ignore[arg-type]


def answers(core: KnowledgeAgentCore) -> dict[str, list]:
    return {
        f"{mode}: {query}": [
            [r.item.title, pytest.approx(r.relevance_score, rel=1e-9)]
            for r in core.search(query, mode=mode, limit=5, context_window=0)
        ]
        for query, mode in QUERIES
    }


def embedded_texts(server: EmbeddingServer) -> list[str]:
    return [text for body in server.bodies() for text in body["input"]]


def files(folder: Path) -> dict[str, bytes]:
    return {
        path.relative_to(folder).as_posix(): path.read_bytes()
        for path in sorted((folder / "index").rglob("*"))
        if path.is_file()
    }


def entries(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """The segment entries of a manifest: TF-IDF lists them by kind, dense in one list."""
    listed = manifest["segments"]
    return [*listed["chunks"], *listed["items"]] if isinstance(listed, dict) else listed


def messages(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [record.getMessage() for record in caplog.records]


# -- a sound legacy base -------------------------------------------------------------------


def test_a_legacy_base_is_upgraded_in_place_and_answers_as_before(
    kb: Path, embeddings: EmbeddingServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="knowledge_agent")
    with open_core(kb, embeddings) as core:
        assert answers(core) == EXPECTED
        status = core.check()  # every checksum recorded by the upgrade, verified
        assert status.consistent and not status.damaged, status.problems
    logged = messages(caplog)
    assert not [m for m in logged if REBUILT.search(m)], logged
    upgraded = sorted(m for m in logged if m.startswith("upgraded the "))
    assert upgraded == [  # each index by its label and folder
        f"upgraded the {label} index in {kb / 'index' / name} to this version's format "
        "(checksums recorded; nothing rebuilt)"
        for label, name in (("dense", "dense"), ("keyword", "whoosh"), ("semantic", "tfidf"))
    ], logged
    # The server embedded the dense queries, and no document.
    queries = {query for query, _ in QUERIES}
    assert embedded_texts(embeddings) and set(embedded_texts(embeddings)) <= queries

    # On disk: the segment files as the previous release wrote them, and no other file
    # changed but the three JSON files now sealed and a sums file beside each TOC.
    old, new = files(LEGACY), files(kb)
    assert {name: new[name] for name in old if name not in SEALED_LATER} == {
        name: data for name, data in old.items() if name not in SEALED_LATER
    }
    sums = sorted(set(new) - set(old))
    assert sums == ["index/whoosh/chunks/_MAIN_3.sums", "index/whoosh/items/_MAIN_3.sums"]
    state = read_state(kb / "index" / "whoosh" / "state.json")
    assert not state.legacy
    assert state.applied_seq == json.loads(old["index/whoosh/state.json"])["applied_seq"]
    for index, tag in (("tfidf", "knowledge_agent.tfidf/2"), ("dense", "knowledge_agent.dense/2")):
        manifest = read_sealed_json(kb / "index" / index / "manifest.json")
        legacy = json.loads(old[f"index/{index}/manifest.json"])
        assert manifest["format"] == tag
        for key in ("config", "applied_seq", "next_file"):
            assert manifest[key] == legacy[key]
        # Each entry as it was, with the size and CRC-32 of its files as they are.
        for entry, was in zip(entries(manifest), entries(legacy), strict=True):
            recorded = entry.pop("files")
            assert entry == was and recorded
            for name, value in recorded.items():
                data = new[f"index/{index}/{name}"]
                assert value == {"size": len(data), "crc32": zlib.crc32(data)}

    # The next open finds nothing to upgrade, and still embeds no document.
    caplog.clear()
    embeddings.requests.clear()
    with open_core(kb, embeddings) as core:
        assert answers(core) == EXPECTED
        assert core.check().consistent
    assert not [m for m in messages(caplog) if REBUILT.search(m) or "upgraded" in m]
    assert set(embedded_texts(embeddings)) <= queries
    assert files(kb) == new


def test_a_write_to_a_legacy_base_upgrades_it_first_and_embeds_only_itself(
    kb: Path, embeddings: EmbeddingServer, caplog: pytest.LogCaptureFixture
) -> None:
    """Opened while another process wrote (nothing upgraded), then written once the lock is
    free: the write upgrades the indexes before it changes them."""
    caplog.set_level(logging.INFO, logger="knowledge_agent")
    with ExitStack() as stack:
        with another_writer(kb):
            core = stack.enter_context(open_core(kb, embeddings))
            assert answers(core) == EXPECTED
        assert files(kb) == files(LEGACY)
        assert not [m for m in messages(caplog) if m.startswith("upgraded the ")]
        embeddings.requests.clear()
        core.add_text("A ferry timetable for tokwritten.", title="timetable")
        assert sum(m.startswith("upgraded the ") for m in messages(caplog)) == 3
        assert core.search("tokwritten", mode="dense", limit=1)[0].item.title == "timetable"
        assert core.check().consistent
    written = "timetable\nA ferry timetable for tokwritten."
    assert embedded_texts(embeddings) == [written, "tokwritten"]
    assert not [m for m in messages(caplog) if REBUILT.search(m)]


# -- the write lock held by another process ------------------------------------------------


def test_a_legacy_base_read_while_another_process_writes_is_read_as_it_is(
    kb: Path, embeddings: EmbeddingServer
) -> None:
    """Chosen behaviour: a reader that cannot take the lock accepts a legacy generation
    read-only (as the previous release read it), writes nothing, and reports no damage;
    the next process that can write upgrades it, and the reader moves on to the sealed
    generation without a pause."""
    with ExitStack() as stack:
        with another_writer(kb):
            reader = stack.enter_context(open_core(kb, embeddings))
            assert answers(reader) == EXPECTED
            status = reader.check()
            assert status.consistent and not status.damaged, status.problems
        assert files(kb) == files(LEGACY)
        with open_core(kb, embeddings) as writer:  # the lock is free: upgraded now
            assert answers(writer) == EXPECTED
        assert not read_state(kb / "index" / "whoosh" / "state.json").legacy
        # The reader moves on to the sealed generation: same answers, every sum verified.
        assert answers(reader) == EXPECTED
        assert reader.check().consistent
    assert set(embedded_texts(embeddings)) <= {query for query, _ in QUERIES}


def test_a_damaged_legacy_index_read_while_another_process_writes_is_refused(
    kb: Path, embeddings: EmbeddingServer
) -> None:
    segment = kb / "index" / "tfidf" / "chunks-00000001.npz"
    segment.write_bytes(segment.read_bytes()[:-100])
    with another_writer(kb), open_core(kb, embeddings) as core:
        found = core.search("beacon pier", mode="keyword", limit=5, context_window=0)
        assert [r.item.title for r in found] == ["beacon"]
        with pytest.raises(DamagedIndexError) as refused:
            core.search("ferry", mode="semantic")
        assert HINT in str(refused.value) and "semantic index" in str(refused.value)


# -- damage is still damage ----------------------------------------------------------------


def _flip(data: bytes) -> bytes:
    middle = len(data) // 2
    return data[:middle] + bytes([data[middle] ^ 0xFF]) + data[middle + 1 :]


def _cut(data: bytes) -> bytes:
    return data[: len(data) // 2]


# (file, how it is damaged, the index found damaged). Only what the previous release's
# files can show: a changed byte inside vectors or a Whoosh segment went unnoticed then,
# and no sum was ever recorded to notice it by.
DAMAGES = {
    "semantic segment changed": ("index/tfidf/chunks-00000001.npz", _flip, "semantic"),
    "semantic segment cut": ("index/tfidf/items-00000004.npz", _cut, "semantic"),
    "semantic segment missing": ("index/tfidf/chunks-00000003.npz", None, "semantic"),
    "semantic manifest cut": ("index/tfidf/manifest.json", _cut, "semantic"),
    "dense metadata changed": ("index/dense/seg-00000001.meta.npz", _flip, "dense"),
    "dense vectors cut": ("index/dense/seg-00000002.vectors.npy", _cut, "dense"),
    "dense manifest changed": ("index/dense/manifest.json", _flip, "dense"),
    "keyword segment cut": ("index/whoosh/chunks/MAIN_*.seg", _cut, "keyword"),
    "keyword TOC changed": ("index/whoosh/items/_MAIN_3.toc", _flip, "keyword"),
    "keyword state cut": ("index/whoosh/state.json", _cut, "keyword"),
    # Generations without sums, and nothing saying the previous release wrote them.
    "keyword state missing": ("index/whoosh/state.json", None, "keyword"),
}


@pytest.mark.parametrize("what", DAMAGES)
def test_damage_to_a_legacy_base_is_found_and_rebuilt(
    kb: Path, embeddings: EmbeddingServer, what: str, caplog: pytest.LogCaptureFixture
) -> None:
    pattern, spoil, index = DAMAGES[what]
    path = max(kb.glob(pattern), key=lambda found: found.stat().st_size)
    if spoil is None:
        path.unlink()
    else:
        path.write_bytes(spoil(path.read_bytes()))
    with open_core(kb, embeddings, rebuild_unreadable=False) as core:
        status = core.check()
        assert not status.consistent
        assert {damage.index for damage in status.damaged} == {index}, status.damaged
    # Opened with the lock free: the damaged index is rebuilt, never sealed as it is, and
    # only a damaged dense index has the documents embedded again.
    caplog.set_level(logging.WARNING, logger="knowledge_agent")
    embeddings.requests.clear()
    with open_core(kb, embeddings) as core:
        assert core.check().consistent
        found = answers(core)
    assert [m for m in messages(caplog) if m.startswith("rebuilding the ")]
    assert {key: [title for title, _ in hits] for key, hits in found.items()} == {
        key: [title for title, _ in hits] for key, hits in EXPECTED.items()
    }
    documents = set(embedded_texts(embeddings)) - {query for query, _ in QUERIES}
    assert len(documents) == (9 if index == "dense" else 0), documents


# -- the legacy forms, exactly -------------------------------------------------------------


def _verify(folder: Path) -> list[str]:
    """The files of the index in ``folder`` (under ``index/``) found damaged."""
    verify = {"whoosh": verify_keyword_folder, "tfidf": verify_tfidf_folder}.get(
        folder.name, verify_dense_folder
    )
    return [Path(damage.path).name for damage in verify(folder, full=True)]


@pytest.mark.parametrize(
    ("index", "name", "change"),
    [
        ("tfidf", "manifest.json", lambda m: {**m, "format": "knowledge_agent.tfidf/2"}),
        ("tfidf", "manifest.json", lambda m: {**m, "format": "knowledge_agent.tfidf/0"}),
        ("dense", "manifest.json", lambda m: {**m, "format": "knowledge_agent.dense/2"}),
        ("dense", "manifest.json", lambda m: [m]),
        (
            "dense",
            "manifest.json",
            lambda m: {**m, "segments": [{**m["segments"][0], "files": {}}]},
        ),
        ("whoosh", "state.json", lambda m: {**m, "generation": 1}),
        ("whoosh", "state.json", lambda m: {"applied_seq": True}),
        ("whoosh", "state.json", lambda m: {"applied_seq": -1}),
    ],
    ids=[
        "tfidf-new-tag",
        "tfidf-other-tag",
        "dense-new-tag",
        "dense-not-an-object",
        "dense-entry-with-files",
        "state-extra-key",
        "state-bool",
        "state-negative",
    ],
)
def test_only_the_exact_legacy_forms_are_accepted(
    kb: Path, index: str, name: str, change: Callable[[Any], Any]
) -> None:
    """Plain JSON that is not what the previous release wrote is damage."""
    folder = kb / "index" / index
    assert _verify(folder) == []  # the legacy form itself: nothing damaged
    path = folder / name
    path.write_text(json.dumps(change(json.loads(path.read_bytes()))))
    assert name in _verify(folder)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_a_cut_legacy_json_file_is_damage(tmp_path: Path, data: st.DataObject) -> None:
    """Every file of the previous release's JSON ends with its closing brace, so no cut of
    one parses: a torn legacy file never passes for a clean one."""
    index, name = data.draw(
        st.sampled_from(
            [("whoosh", "state.json"), ("tfidf", "manifest.json"), ("dense", "manifest.json")]
        )
    )
    original = (LEGACY / "index" / index / name).read_bytes()
    cut = data.draw(st.integers(0, len(original) - 1))
    folder = tmp_path / f"case-{index}-{cut}" / index
    shutil.copytree(LEGACY / "index" / index, folder, dirs_exist_ok=True)
    (folder / name).write_bytes(original[:cut])
    assert name in _verify(folder)
    with pytest.raises(ValueError):
        read_json_file(folder / name)


# -- upgraded by whichever writer comes first ----------------------------------------------


def test_a_legacy_index_written_to_directly_records_its_sums(kb: Path) -> None:
    """An index object that writes before anything upgraded it (no data folder around
    it) records the sums of the legacy segments it keeps, and seals what it writes."""
    keyword, semantic = kb / "index" / "whoosh", kb / "index" / "tfidf"
    with SearchIndexManager(keyword) as manager, SemanticSearcher(semantic) as searcher:
        assert manager.legacy and searcher.legacy
        manager.set_applied_seq(manager.applied_seq)
        searcher.set_applied_seq(searcher.applied_seq + 1)
        assert not manager.legacy and not searcher.legacy
    assert verify_keyword_folder(keyword, full=True) == []
    assert verify_tfidf_folder(semantic, full=True) == []
    assert not read_state(keyword / "state.json").legacy
    with SemanticSearcher(semantic) as searcher:
        assert not searcher.legacy and searcher.item_count() > 0


# -- a rebuild for the other indexes' sake -------------------------------------------------


@pytest.mark.parametrize("dense", ["sound", "damaged unseen"])
def test_rebuilding_the_keyword_index_embeds_nothing_again(
    tmp_path: Path,
    embeddings: EmbeddingServer,
    dense: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Every index is rebuilt when one of keyword or TF-IDF is, but the dense index keeps
    the vectors it holds — once its files verify whole: vectors damaged where opening did
    not look (a large index is checked for sizes only) are embedded again, not copied."""
    kb = tmp_path / "kb"
    config = {"provider": "openai", "base_url": embeddings.base_url, "model": "m"}
    with KnowledgeAgentCore(kb, embedder=config, workers=1) as core:
        for n in range(5):
            core.add_text(f"Note tok{n} about the harbour and ferry {n}.", title=f"note {n}")
        before = answers_of(core)
    state = kb / "index" / "whoosh" / "state.json"
    state.write_bytes(_flip(state.read_bytes()))
    if dense != "sound":
        vectors = next((kb / "index" / "dense").glob("*.vectors.npy"))
        vectors.write_bytes(vectors.read_bytes()[:-4] + b"\x7f\x7f\x7f\x7f")
        # Opening checks sizes only, as it does for an index larger than its budget.
        monkeypatch.setattr(segment_store, "VerifiedFiles", lambda: VerifiedFiles(budget=0))
    caplog.set_level(logging.WARNING, logger="knowledge_agent")
    embeddings.requests.clear()
    with KnowledgeAgentCore(kb, embedder=config, workers=1) as core:
        assert answers_of(core) == before
        assert core.check().consistent
    assert [m for m in messages(caplog) if m.startswith("rebuilding the whoosh index")]
    documents = [text for text in embedded_texts(embeddings) if text.startswith("note ")]
    if dense == "sound":
        assert documents == []
    else:
        assert len(documents) == 5
        assert [m for m in messages(caplog) if m.startswith("embedding every row again")]


def answers_of(core: KnowledgeAgentCore) -> list[list[str]]:
    return [
        [r.item.title for r in core.search(query, mode=mode, limit=3, context_window=0)]
        for query, mode in (("tok3 harbour", "dense"), ("ferry tok1", "hybrid"))
    ]
