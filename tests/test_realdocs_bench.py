"""The real-docs benchmark harness (benchmarks/realdocs.py): its question files, the passage it
counts as shown, its figures, and a whole run on a small sdist made here (no download)."""

from __future__ import annotations

import hashlib
import io
import re
import tarfile
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from benchmarks.realdocs import (
    QuestionRun,
    SetRun,
    Shown,
    overlaps,
    run_set,
    shown_passage,
    summarize,
)
from benchmarks.realdocs_sets import (
    SET_NAMES,
    Answer,
    DocSet,
    Question,
    check_answers,
    fetch_docs,
    load_offtopic,
    load_set,
)
from knowledge_agent.models.item_summary import ItemSummary
from knowledge_agent.models.search_result import MatchedChunk, Passage, SearchResult


@pytest.mark.parametrize("name", SET_NAMES)
def test_each_set_pins_its_sdist_and_has_40_located_questions(name: str) -> None:
    docset = load_set(name)
    assert docset.written == "2026-11-26"
    assert re.fullmatch(r"[0-9a-f]{64}", docset.sha256)
    assert docset.sdist.endswith(".tar.gz") and docset.version in docset.sdist
    assert len(docset.questions) == 40
    assert len({q.id for q in docset.questions}) == 40
    for question in docset.questions:
        assert question.answers, question.id
        assert all(1 <= a.start <= a.end for a in question.answers), question.id


def test_offtopic_questions_are_twenty_and_have_no_answer() -> None:
    offtopic = load_offtopic()
    assert len(offtopic) == 20 and len({q.id for q in offtopic}) == 20
    assert all(not q.answers for q in offtopic)


def _result(chunks: list[MatchedChunk], path: str = "guide.md") -> SearchResult:
    item = ItemSummary(id="i1", metadata={"relative_path": path})
    return SearchResult(item=item, relevance_score=1.0, confidence=0.5, matched_chunks=chunks)


def test_shown_passage_prefers_the_located_passage_over_its_chunk() -> None:
    chunk = MatchedChunk("c1", "a\nb\nc\nd", metadata={"start_line": 10, "end_line": 13})
    chunk.passage = Passage("c\nd", 4, 7, start_line=12, end_line=13, heading_path=["A", "B"])
    shown = shown_passage(_result([chunk]))
    assert shown == Shown(12, 13, "c\nd", "passage", "A > B")


def test_shown_passage_falls_back_to_the_chunk_lines_and_to_none() -> None:
    chunk = MatchedChunk("c1", "text", heading="H", metadata={"start_line": 3, "end_line": 9})
    assert shown_passage(_result([chunk])) == Shown(3, 9, "text", "chunk", "H")
    assert shown_passage(_result([])) is None


@given(
    st.integers(1, 60), st.integers(0, 20), st.integers(1, 60), st.integers(0, 20)
)  # fmt: skip
def test_overlap_means_a_shared_line(start: int, span: int, a_start: int, a_span: int) -> None:
    shown = Shown(start, start + span, "", "chunk")
    answer = Answer("f", a_start, a_start + a_span)
    shared = set(range(start, start + span + 1)) & set(range(a_start, a_start + a_span + 1))
    assert overlaps(shown, answer) is bool(shared)


def test_overlap_without_lines_is_a_miss() -> None:
    assert not overlaps(None, Answer("f", 1, 5))
    assert not overlaps(Shown(None, None, "", "chunk"), Answer("f", 1, 5))


def _run(question_id: str, confidence: float, file_hit: bool, distinct: int = 10) -> QuestionRun:
    return QuestionRun(
        id=question_id, question="q", kind="", expected=[], top_file="f", shown_lines=[1, 2],
        shown_source="chunk", shown_heading="", shown_text="", file_hit=file_hit,
        passage_hit=file_hit, distinct_documents=distinct, confidence=confidence, ms=1.0,
    )  # fmt: skip


def test_summary_margin_threshold_and_auc_use_correct_answers_against_offtopic() -> None:
    docset = DocSet("s", "p", "1", "p-1.tar.gz", "0" * 64, "p-1/docs", ("*.md",), "d", ())
    run = SetRun(docset, files=3, chunks=9, failed=0, ingest_seconds=0.1)
    run.questions = [
        _run("a", 0.5, True),
        _run("b", 0.15, True, distinct=4),
        _run("c", 0.01, False),  # a wrong file: not counted among the correct answers
    ]
    run.offtopic = [_run("o1", 0.25, False), _run("o2", 0.0, False)]
    figures = summarize(run, threshold=0.2)
    assert figures["file@1"] == pytest.approx(2 / 3)
    assert figures["lowest correct"] == 0.15 and figures["highest off-topic"] == 0.25
    assert figures["margin"] == pytest.approx(-0.10)
    assert figures["correct dropped"] == 1 and figures["off-topic kept"] == 1
    assert figures["AUC"] == pytest.approx(0.75)  # 0.5 beats both, 0.15 beats one of two
    assert figures["questions with 10 docs"] == 2


def _sdist(folder: Path, files: dict[str, str]) -> Path:
    """A tar.gz holding ``files`` (name → text), as a source distribution would."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "pkg-1.0.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo("pkg-1.0/docs/link.md")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
        tar.addfile(link)
    return path


GUIDE = "# Guide\n\nIntro.\n\n## Frobnicate\n\nCall frobnicate() with a widget to polish it.\n"
OTHER = "# Other\n\nNothing about that here: gardening and tomatoes.\n"


def _docset(sha256: str) -> DocSet:
    question = Question("t1", "how do I polish a widget", "how-to", (Answer("guide.md", 5, 7),))
    return DocSet(
        "tiny", "pkg", "1.0", "pkg-1.0.tar.gz", sha256, "pkg-1.0/docs", ("*.md",),
        "2026-11-26", (question,),
    )  # fmt: skip


def test_fetch_extracts_only_the_docs_folder_of_a_matching_sdist(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    archive = _sdist(
        cache / "sdist",
        {"pkg-1.0/docs/guide.md": GUIDE, "pkg-1.0/setup.py": "print()", "pkg-1.0/docs/x.md": "x"},
    )
    sha = hashlib.sha256(archive.read_bytes()).hexdigest()
    with pytest.raises(RuntimeError, match="SHA-256"):
        fetch_docs(_docset("f" * 64), cache)
    docs = fetch_docs(_docset(sha), cache)
    assert sorted(p.name for p in docs.iterdir()) == ["guide.md", "x.md"]  # no symlink
    assert not (cache / "src" / "pkg-1.0" / "setup.py").exists()
    assert check_answers(_docset(sha), docs) == []
    bad = replace(_docset(sha), questions=(Question("t2", "q", "", (Answer("guide.md", 5, 99),)),))
    assert check_answers(bad, docs) == ["t2: guide.md:5-99 outside 1-7"]


def test_a_run_collects_the_docs_and_scores_the_first_passage(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    archive = _sdist(
        cache / "sdist", {"pkg-1.0/docs/guide.md": GUIDE, "pkg-1.0/docs/other.md": OTHER}
    )
    docset = _docset(hashlib.sha256(archive.read_bytes()).hexdigest())
    offtopic = (Question("o1", "What is the capital of France?"),)
    run = run_set(docset, offtopic, cache, "hybrid", log=lambda message: None)
    assert run.files == 2
    [answered] = run.questions
    assert answered.top_file == "guide.md" and answered.file_hit
    assert answered.passage_hit, answered.shown_lines
    assert answered.distinct_documents >= 1
    [off] = run.offtopic
    assert off.file_hit is False and off.expected == []
