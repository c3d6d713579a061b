"""The real-docs question sets (``benchmarks/realdocs/*.json``) and the documentation they are
asked of, downloaded as a package source distribution into a cache folder outside the project.

Each set file names the package, its pinned version, the sdist's SHA-256, the docs folder inside
it and the files to collect; each question names the files and 1-based inclusive line ranges
that answer it. ``offtopic.json`` holds questions no set can answer.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

QUESTIONS_DIR = Path(__file__).resolve().parent / "realdocs"
SET_NAMES = ("starlette", "django")
CACHE_ENV = "KNOWLEDGE_AGENT_BENCH_CACHE"


@dataclass(frozen=True)
class Answer:
    """Lines ``start``–``end`` (1-based, inclusive) of ``file``, relative to the docs root."""

    file: str
    start: int
    end: int

    def label(self) -> str:
        return f"{self.file}:{self.start}-{self.end}"


@dataclass(frozen=True)
class Question:
    id: str
    text: str
    kind: str = ""
    answers: tuple[Answer, ...] = ()


@dataclass(frozen=True)
class DocSet:
    name: str
    package: str
    version: str
    sdist: str
    sha256: str
    docs_root: str
    include: tuple[str, ...]
    written: str
    questions: tuple[Question, ...]


def default_cache_dir() -> Path:
    """``$KNOWLEDGE_AGENT_BENCH_CACHE``, else ``~/.cache/knowledge_agent-bench``."""
    configured = os.environ.get(CACHE_ENV)
    return Path(configured) if configured else Path.home() / ".cache" / "knowledge_agent-bench"


def load_set(name: str, folder: Path = QUESTIONS_DIR) -> DocSet:
    """The question set ``name`` (``folder/name.json``)."""
    data = json.loads((folder / f"{name}.json").read_text(encoding="utf-8"))
    return DocSet(
        name=data["name"],
        package=data["package"],
        version=data["version"],
        sdist=data["sdist"],
        sha256=data["sha256"],
        docs_root=data["docs_root"],
        include=tuple(data["include"]),
        written=data["written"],
        questions=tuple(_question(entry) for entry in data["questions"]),
    )


def load_offtopic(folder: Path = QUESTIONS_DIR) -> tuple[Question, ...]:
    """The questions no set answers (``folder/offtopic.json``)."""
    data = json.loads((folder / "offtopic.json").read_text(encoding="utf-8"))
    return tuple(_question(entry) for entry in data["questions"])


def _question(entry: dict) -> Question:
    answers = tuple(
        Answer(answer["file"], answer["lines"][0], answer["lines"][1])
        for answer in entry.get("answers", ())
    )
    return Question(entry["id"], entry["question"], entry.get("kind", ""), answers)


def fetch_docs(docset: DocSet, cache: Path) -> Path:
    """The set's docs folder under ``cache/src``: the pinned sdist is downloaded with pip into
    ``cache/sdist`` and checked against its SHA-256 on first use, then only the docs folder
    is extracted. Raises ``RuntimeError`` when the download fails or does not match."""
    docs = cache / "src" / docset.docs_root
    done = cache / "src" / f".{docset.sdist}.extracted"
    if done.is_file() and docs.is_dir():
        return docs
    archive = cache / "sdist" / docset.sdist
    if not archive.is_file():
        _download(docset, archive.parent)
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()
    if digest != docset.sha256:
        raise RuntimeError(f"{archive}: SHA-256 {digest}, expected {docset.sha256}")
    _extract(archive, docset.docs_root, cache / "src")
    done.write_text(docset.sha256 + "\n")
    return docs


def _download(docset: DocSet, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    command = [
        sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps",
        "--disable-pip-version-check", "-d", str(folder), f"{docset.package}=={docset.version}",
    ]  # fmt: skip
    completed = subprocess.run(command, capture_output=True, text=True, check=False)
    if completed.returncode != 0 or not (folder / docset.sdist).is_file():
        tail = (completed.stderr or completed.stdout).strip().splitlines()[-3:]
        raise RuntimeError(f"pip download {docset.package}=={docset.version} failed: {tail}")


def _extract(archive: Path, docs_root: str, destination: Path) -> None:
    """Extract the regular files under ``docs_root`` (and no path that leaves it)."""
    prefix = PurePosixPath(docs_root)
    with tarfile.open(archive) as tar:
        members = [
            member
            for member in tar.getmembers()
            if member.isfile()
            and PurePosixPath(member.name).is_relative_to(prefix)
            and ".." not in PurePosixPath(member.name).parts
            and not PurePosixPath(member.name).is_absolute()
        ]
        if not members:
            raise RuntimeError(f"{archive}: no files under {docs_root}")
        if hasattr(tarfile, "data_filter"):
            tar.extractall(destination, members=members, filter="data")
        else:  # Python without extraction filters: the members were checked above
            tar.extractall(destination, members=members)


def check_answers(docset: DocSet, docs: Path) -> list[str]:
    """What is wrong with the set's answer locations in ``docs`` (empty when every file
    exists and every range lies within it)."""
    problems = []
    lengths: dict[str, int] = {}
    for question in docset.questions:
        if not question.answers:
            problems.append(f"{question.id}: no answer")
        for answer in question.answers:
            if answer.file not in lengths:
                path = docs / answer.file
                lengths[answer.file] = _line_count(path) if path.is_file() else -1
            length = lengths[answer.file]
            if length < 0:
                problems.append(f"{question.id}: {answer.file} not found")
            elif not 1 <= answer.start <= answer.end <= length:
                problems.append(f"{question.id}: {answer.label()} outside 1-{length}")
    return problems


def _line_count(path: Path) -> int:
    """Lines as ``sed`` numbers them: a last line without its newline still counts."""
    text = path.read_text(encoding="utf-8")
    return text.count("\n") + int(bool(text) and not text.endswith("\n"))
