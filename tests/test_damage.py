"""Damage to any index file is found: ``check`` names the index and the file, ``check
--repair`` rebuilds it from SQLite, and a search either recovers (rebuilding it, with a
warning) or fails with one line naming ``knowledge-agent check --repair``."""

from __future__ import annotations

import hashlib
import logging
import re
import shutil
import subprocess
import sys
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from files import another_writer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from whoosh.filedb.compound import CompoundStorage
from whoosh.filedb.filestore import FileStorage

from knowledge_agent import KnowledgeAgentCore
from knowledge_agent.backends.local.checksums import (
    FileSum,
    VerifiedFiles,
    file_sum,
    read_sealed_json,
    seal_json,
    unseal_json,
)
from knowledge_agent.backends.local.shared_indexes import SharedIndexes
from knowledge_agent.cli import cli
from knowledge_agent.errors import DamagedIndexError

HINT = "knowledge-agent check --repair"
WORDS = ["harbour", "lighthouse", "ferry", "anchor", "tide", "beacon", "pier"]
QUERIES = [("tok3 harbour", "hybrid"), ("tok7", "keyword"), ("tok11 beacon", "semantic")]
DENSE_QUERY = ("tok5 ferry", "dense")


class FakeEmbedder:
    """Hashed bag of words → unit vector: deterministic, no model."""

    name = "fake:damage"
    dimensions = 32

    def embed(self, texts: Sequence[str], *, kind: str = "document") -> np.ndarray:
        rows = np.zeros((len(texts), self.dimensions), np.float32)
        for row, text in enumerate(texts):
            for word in re.findall(r"\w+", text.lower()):
                rows[row, hashlib.sha256(word.encode()).digest()[0] % self.dimensions] += 1
        norms = np.linalg.norm(rows, axis=1, keepdims=True)
        return np.divide(rows, norms, out=np.zeros_like(rows), where=norms > 0)


def open_core(data: Path, **options: object) -> KnowledgeAgentCore:
    return KnowledgeAgentCore(data, embedder=FakeEmbedder(), workers=1, **options)  # type: ignore[arg-type]


def note(n: int) -> str:
    return f"Note tok{n} about the {WORDS[n % len(WORDS)]} and the {WORDS[n * 3 % 7]} tide.\n"


class Answer(dict[str, float]):
    """The titles found and their scores. Equal to another with the same titles and scores
    within 1%: a rebuild drops the deleted rows that a keyword index's statistics still
    count until its segments are merged, which moves scores a little."""

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, dict)
            and self.keys() == other.keys()
            and all(self[title] == pytest.approx(other[title], rel=0.01) for title in self)
        )

    __hash__ = None  # type: ignore[assignment]


def answer(core: KnowledgeAgentCore, query: str, mode: str) -> Answer:
    found = core.search(query, mode=mode, limit=5, context_window=0)
    return Answer({r.item.title: r.relevance_score for r in found})


def answers(core: KnowledgeAgentCore) -> list[Answer]:
    return [answer(core, query, mode) for query, mode in [*QUERIES, DENSE_QUERY]]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Answer]]:
    """A data folder with every index on disk, in several segments, one item deleted; and
    the answers to the queries before any damage."""
    data = tmp_path_factory.mktemp("built") / "kb"
    with open_core(data) as core:
        for n in range(20):
            core.add_text(note(n) * 3, title=f"note {n}")
    with open_core(data) as core:
        for n in range(20, 30):
            core.add_text(note(n) * 3, title=f"note {n}")
        doomed = core.search("tok4", mode="keyword")[0].item.id
        core.delete_knowledge_item(doomed)
    with open_core(data) as core:
        assert core.check().consistent
        return data, answers(core)


@pytest.fixture
def kb(built: tuple[Path, list], tmp_path: Path) -> Path:
    return Path(shutil.copytree(built[0], tmp_path / "kb"))


@pytest.fixture
def expected(built: tuple[Path, list]) -> list[Answer]:
    return built[1]


# The index files of every kind, by what they are: (index, glob under index/).
FILES = {
    "keyword segment": ("keyword", "whoosh/chunks/MAIN_*.seg"),
    "keyword TOC": ("keyword", "whoosh/items/_MAIN_*.toc"),
    "keyword checksums": ("keyword", "whoosh/chunks/_MAIN_*.sums"),
    "keyword state": ("keyword", "whoosh/state.json"),
    "semantic segment": ("semantic", "tfidf/chunks-*.npz"),
    "semantic manifest": ("semantic", "tfidf/manifest.json"),
    "dense vectors": ("dense", "dense/*.vectors.npy"),
    "dense metadata": ("dense", "dense/*.meta.npz"),
    "dense manifest": ("dense", "dense/manifest.json"),
}


def flip(data: bytes) -> bytes:
    middle = len(data) // 2
    return data[:middle] + bytes([data[middle] ^ 0xFF]) + data[middle + 1 :]


DAMAGES: dict[str, Callable[[bytes], bytes]] = {
    "flip": flip,
    "truncate": lambda data: data[: len(data) // 2],
    "splice": lambda data: data[: len(data) // 2] + b"spliced!" + data[len(data) // 2 :],
}


def index_file(kb: Path, what: str) -> tuple[str, Path]:
    """The index ``what`` belongs to and its largest file of that kind."""
    index, pattern = FILES[what]
    found = sorted((kb / "index").glob(pattern), key=lambda path: path.stat().st_size)
    assert found, pattern
    return index, found[-1]


def damage(path: Path, how: str) -> None:
    path.write_bytes(DAMAGES[how](path.read_bytes()))


# -- check and check --repair --------------------------------------------------------------


@pytest.mark.parametrize("how", DAMAGES)
@pytest.mark.parametrize("what", FILES)
def test_check_names_the_damaged_index_and_repair_rebuilds_it(
    kb: Path, expected: list, what: str, how: str
) -> None:
    index, path = index_file(kb, what)
    damage(path, how)
    with open_core(kb, rebuild_unreadable=False) as core:
        status = core.check()
        assert not status.consistent
        assert any(d.index == index and d.file == str(path) for d in status.damaged), status
        assert any(p.startswith(f"the {index} index is damaged: {path}") for p in status.problems)
        repaired = core.check(repair=True)
        assert repaired.consistent and repaired.repaired and not repaired.damaged
        assert answers(core) == expected
    with open_core(kb) as core:
        assert core.check().consistent


def test_a_generation_without_checksums_is_damage(kb: Path, expected: list) -> None:
    """A generation whose sums are gone, beside a sealed state file, is rebuilt, not
    trusted (one of the previous release, beside its plain state file, is upgraded:
    test_upgrade.py)."""
    sums = next((kb / "index" / "whoosh" / "chunks").glob("_MAIN_*.sums"))
    sums.unlink()
    with open_core(kb, rebuild_unreadable=False) as core:
        damaged = core.check().damaged
        assert [(d.index, d.file) for d in damaged] == [("keyword", str(sums))]
        assert "missing" in damaged[0].problem
    with open_core(kb) as core:  # the lock is free: rebuilt on open
        assert answers(core) == expected and core.check().consistent


# -- searching ---------------------------------------------------------------------------


@pytest.mark.parametrize("how", DAMAGES)
@pytest.mark.parametrize("what", FILES)
def test_a_search_recovers_or_names_check_repair(
    kb: Path, expected: list, what: str, how: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A small index is checksummed whole on opening (VERIFY_ON_OPEN_BYTES), so even a
    changed byte in a segment is found before any query reads it."""
    index, path = index_file(kb, what)
    damage(path, how)
    with another_writer(kb), open_core(kb) as core:
        outcomes = []
        for (query, mode), wanted in zip([*QUERIES, DENSE_QUERY], expected, strict=True):
            try:
                got = answer(core, query, mode)
            except DamagedIndexError as exc:
                message = str(exc)
                assert HINT in message and "\n" not in message and f"{index} index" in message
                outcomes.append("refused")
            else:
                assert got == wanted  # never silently different, never silently empty
                outcomes.append("answered")
        # Hybrid reads every index, every mode the keyword index's statistics.
        refused = {"keyword": [0, 1, 2, 3], "semantic": [0, 2], "dense": [0, 3]}[index]
        assert [i for i, outcome in enumerate(outcomes) if outcome == "refused"] == refused
    with caplog.at_level(logging.WARNING), open_core(kb) as core:  # the lock is free
        assert answers(core) == expected
        assert core.check().consistent
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("rebuilding the" in message for message in warned), warned


def _stored_fields_range(folder: Path) -> tuple[Path, int, int]:
    """The largest segment file of a Whoosh index and where its stored fields are in it."""
    seg = max(folder.glob("MAIN_*.seg"), key=lambda path: path.stat().st_size)
    compound = CompoundStorage(FileStorage(str(folder)).open_file(seg.name), use_mmap=False)
    try:
        name = next(name for name in compound.list() if name.endswith("._stored.col"))
        offset, length = compound.range(name)
    finally:
        compound.close()
    return seg, offset, length


def _spoil_in_place(path: Path, offset: int, length: int) -> None:
    """Overwrite bytes of a file that readers have open (and mapped): they see the change."""
    with open(path, "r+b") as fh:
        fh.seek(offset)
        data = fh.read(length)
        fh.seek(offset)
        fh.write(bytes(b ^ 0xFF for b in data))


@pytest.mark.parametrize("lock_free", [True, False], ids=["lock free", "another writer"])
def test_damage_found_while_a_search_reads_is_rebuilt_or_named(
    kb: Path, expected: list, lock_free: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """An index opened whole and damaged after: the query that fails to decode it has the
    index verified, then rebuilt (lock free) or named — never answered at item level. What
    a searcher already read and keeps stays valid; a query reading the damaged bytes finds
    them."""
    seg, offset, length = _stored_fields_range(kb / "index" / "whoosh" / "chunks")
    with open_core(kb) as core:
        # A word of a few notes: the searcher reads (and keeps) only their stored fields.
        assert answer(core, "pier", "keyword")
        _spoil_in_place(seg, offset, length // 2)
        if lock_free:
            with caplog.at_level(logging.WARNING):
                assert answers(core) == expected
            warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
            assert any(str(seg) in message for message in warned), warned
            assert core.check().consistent
        else:
            with another_writer(kb), pytest.raises(DamagedIndexError) as refused:
                core.search("tok note harbour", mode="keyword", limit=50)
            assert HINT in str(refused.value) and str(seg) in str(refused.value)


def test_a_write_that_finds_damage_rebuilds_the_index(
    kb: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The writer holds the lock: what it finds damaged it rebuilds, and its write lands."""
    with open_core(kb) as core:
        sums = next((kb / "index" / "whoosh" / "chunks").glob("_MAIN_*.sums"))
        sums.write_bytes(flip(sums.read_bytes()))  # after opening: the next commit reads it
        with caplog.at_level(logging.WARNING):
            added = core.add_text("A late note tokwritten.", title="late")
            assert [r.item.id for r in core.search("tokwritten", mode="keyword")] == [added.id]
        warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert any("rebuilding the whoosh index" in m and str(sums) in m for m in warned), warned
        assert core.check().consistent


# -- the command line, in a real process ---------------------------------------------------


def run(kb: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "knowledge_agent.cli", "--data-dir", str(kb), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_command_line_names_check_repair_in_one_line(tmp_path: Path) -> None:
    kb = tmp_path / "kb"
    with KnowledgeAgentCore(kb, workers=1) as core:
        for n in range(12):
            core.add_text(note(n), title=f"note {n}")
    first = run(kb, "search", "tok3", "-n", "1")
    assert first.returncode == 0 and "note 3" in first.stdout
    seg = max(
        (kb / "index" / "whoosh" / "chunks").glob("MAIN_*.seg"), key=lambda p: p.stat().st_size
    )
    damage(seg, "splice")
    with another_writer(kb):
        refused = run(kb, "search", "tok3")
    assert refused.returncode == 1 and refused.stdout == ""
    assert refused.stderr.count("\n") == 1 and "Traceback" not in refused.stderr
    assert refused.stderr.startswith("Error: ") and HINT in refused.stderr
    checked = run(kb, "check")
    assert checked.returncode == 1
    assert f"the keyword index is damaged: {seg}" in " ".join(checked.stdout.split())
    repaired = run(kb, "check", "--repair")
    assert repaired.returncode == 0 and "consistent (repaired)" in repaired.stdout
    again = run(kb, "search", "tok3", "-n", "1")
    assert again.returncode == 0 and again.stdout == first.stdout


# -- state files that fail to load ---------------------------------------------------------


DEEP = b"[" * 100_000 + b"]" * 100_000  # the file: RecursionError on every command


def sealed_deep(depth: int) -> bytes:
    """Deep JSON with a valid seal, as someone who writes the folder can make."""
    body = b"[" * depth + b"]" * depth
    return b'{"crc32":"%08x","body":' % zlib.crc32(body) + body + b"}\n"


STATE_FILES = {
    "keyword state": "whoosh/state.json",
    "semantic manifest": "tfidf/manifest.json",
    "keyword checksums": "whoosh/chunks/_MAIN_*.sums",
}
COMMANDS = {
    "search": ("search", "tok3"),
    "grep": ("grep", "tok3"),
    "list": ("list",),
    "stats": ("stats",),
    "kb list": ("kb", "list"),
    "rebuild": ("rebuild",),
    "add": ("add", "{docs}"),
    "check --repair": ("check", "--repair"),
}


@pytest.mark.parametrize("content", [DEEP, sealed_deep(20_000)], ids=["deep", "sealed deep"])
@pytest.mark.parametrize("what", STATE_FILES)
def test_a_deeply_nested_state_file_is_an_unreadable_index_for_every_command(
    kb: Path, tmp_path: Path, what: str, content: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # no project file
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "new.md").write_text("A new note tokfresh.\n", encoding="utf-8")
    target = next((kb / "index").glob(STATE_FILES[what]))
    target.write_bytes(content)
    spoiled = tmp_path / "spoiled"
    shutil.copytree(kb, spoiled)
    shutil.rmtree(kb / "index" / "dense")  # the command line runs without an embedder

    def fresh() -> Path:
        folder = tmp_path / "copy"
        shutil.rmtree(folder, ignore_errors=True)
        return Path(shutil.copytree(kb, folder))

    folder = fresh()
    checked = CliRunner().invoke(cli, ["--data-dir", str(folder), "check"])
    assert (checked.exit_code == 1 and checked.exception is None) or isinstance(
        checked.exception, SystemExit
    )
    assert str(folder / "index" / target.relative_to(kb / "index")) in " ".join(
        checked.stdout.split()
    )
    for name, command in COMMANDS.items():
        folder = fresh()
        args = [part.format(docs=docs) for part in command]
        result = CliRunner().invoke(cli, ["--data-dir", str(folder), *args])
        assert result.exit_code == 0, (name, result.output, result.exception)
        with KnowledgeAgentCore(folder, workers=1) as core:  # rebuilt from the database
            assert core.check().consistent, name
            assert core.search("tok3", limit=1)[0].item.title == "note 3"
    with (
        another_writer(spoiled),
        open_core(spoiled) as core,  # the API, nothing rebuilt
        pytest.raises(DamagedIndexError, match=re.escape(HINT)),
    ):
        core.search("tok3")


def test_a_deeply_nested_dense_manifest_is_rebuilt(kb: Path, expected: list) -> None:
    (kb / "index" / "dense" / "manifest.json").write_bytes(sealed_deep(20_000))
    with open_core(kb, rebuild_unreadable=False) as core:
        damaged = core.check().damaged
        assert [d.index for d in damaged] == ["dense"]
        assert "nested too deeply" in damaged[0].problem
    with open_core(kb) as core:
        assert answers(core) == expected and core.check().consistent


# -- any byte ------------------------------------------------------------------------------


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_any_changed_byte_is_found_by_check_or_harmless(
    built: tuple[Path, list], tmp_path_factory: pytest.TempPathFactory, data: st.DataObject
) -> None:
    source, expected = built
    files = sorted(
        path.relative_to(source)
        for path in (source / "index").rglob("*")
        if path.is_file() and path.stat().st_size
    )
    relative = data.draw(st.sampled_from(files), label="file")
    kb = Path(shutil.copytree(source, tmp_path_factory.mktemp("any") / "kb"))
    path = kb / relative
    raw = bytearray(path.read_bytes())
    at = data.draw(st.integers(0, len(raw) - 1), label="offset")
    raw[at] ^= data.draw(st.integers(1, 255), label="xor")
    path.write_bytes(bytes(raw))
    with open_core(kb, rebuild_unreadable=False) as core:
        found = core.check().damaged
    if not any(d.file == str(path) for d in found):
        with open_core(kb) as core:
            assert answers(core) == expected  # harmless
    shutil.rmtree(kb.parent)


# -- the pieces ----------------------------------------------------------------------------


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@given(value=json_values, data=st.data())
def test_a_sealed_file_round_trips_and_refuses_any_changed_byte(
    value: object, data: st.DataObject
) -> None:
    sealed = seal_json(value)
    assert unseal_json(sealed) == value
    at = data.draw(st.integers(0, len(sealed) - 1))
    changed = bytearray(sealed)
    changed[at] ^= data.draw(st.integers(1, 255))
    with pytest.raises(ValueError):
        unseal_json(bytes(changed))


def test_a_sealed_file_is_read_bounded_in_size(tmp_path: Path) -> None:
    path = tmp_path / "big.json"
    path.write_bytes(seal_json(["x" * 1000]))
    assert read_sealed_json(path, limit=2000) == ["x" * 1000]
    with pytest.raises(ValueError, match="larger than 100 bytes"):
        read_sealed_json(path, limit=100)


def test_an_open_checksums_what_it_has_not_verified_within_its_budget(tmp_path: Path) -> None:
    small, large = tmp_path / "small", tmp_path / "large"
    small.write_bytes(b"s" * 10)
    large.write_bytes(b"l" * 100)
    sums = [(path.name, file_sum(path)) for path in (small, large)]
    verified = VerifiedFiles(budget=50)
    assert verified.check(tmp_path, sums) == []  # 110 bytes: over the budget, none read
    verified.check(tmp_path, sums[:1])
    small.write_bytes(b"S" * 10)  # changed (a new version): checked again
    assert [d.path for d in verified.check(tmp_path, sums[:1])] == [str(small)]
    assert FileSum.from_json(file_sum(large).to_json()) == file_sum(large)


# -- what a rebuild leaves ------------------------------------------------------------------


def test_a_write_that_finds_the_dense_index_damaged_leaves_it_rebuilt_and_current(
    kb: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The other indexes stay: the new dense index alone is filled, before the write's
    batch ends (a reader that cannot take the lock after it finds it whole)."""
    with open_core(kb) as core:
        _, vectors = index_file(kb, "dense vectors")
        damage(vectors, "flip")

        def reads_the_damage(*args: object, **kwargs: object) -> None:
            raise DamagedIndexError(f"dense index {vectors}: checksum mismatch")

        # The index opened before the damage: its update is what runs into it.
        monkeypatch.setattr(core.engine.dense_index, "update", reads_the_damage)
        with caplog.at_level(logging.WARNING), core.batch():
            added = core.add_text("A late note tokwritten about the ferry.", title="late")
        warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert any(m.startswith("rebuilding the dense index") for m in warned), warned
        assert not any(m.startswith("rebuilding the whoosh index") for m in warned), warned
        with another_writer(kb):  # nothing can catch up now: what the batch left answers
            found = core.search("tokwritten ferry", mode="dense", limit=1)
            assert [r.item.id for r in found] == [added.id]
            assert core.engine.dense_index.item_count() == core.storage.count_items()
        assert core.check().consistent


def test_check_repair_says_which_index_it_rebuilds_and_why(
    kb: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with open_core(kb) as core, caplog.at_level(logging.WARNING):
        _, segment = index_file(kb, "semantic segment")
        damage(segment, "flip")  # after opening: only check finds it
        assert core.check(repair=True).repaired
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    folder = kb / "index" / "tfidf"
    assert f"rebuilding the tfidf index in {folder} from the database: damaged" in warned


def test_a_query_that_cannot_rebuild_what_it_found_damaged_runs_once(kb: Path) -> None:
    """Told not to rebuild, a query failing on damage is not run again: it fails at once."""
    with open_core(kb, rebuild_unreadable=False) as core:
        _, segment = index_file(kb, "keyword segment")
        damage(segment, "flip")  # after opening: found when the failed query has it verified
        runs: list[int] = []

        def query() -> None:
            runs.append(len(runs))
            raise DamagedIndexError(f"run {len(runs)} found damage")

        backend = core._backend
        assert isinstance(backend, SharedIndexes)
        with pytest.raises(DamagedIndexError, match=re.escape(HINT)) as failed:
            backend.answer(query, "keyword")
        assert runs == [0] and str(failed.value).startswith("run 1 found damage")
