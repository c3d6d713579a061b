"""knowledge-agent demo and the samples shipped inside the package."""

from __future__ import annotations

import ast
import re
import zipfile
from importlib import resources
from pathlib import Path

import pytest
from click.testing import CliRunner
from pypdf import PdfReader

from knowledge_agent.cli import DEMO_QUERIES, _copy_tree, cli

SAMPLES = resources.files("knowledge_agent") / "samples"


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("FORCE_COLOR", raising=False)


def test_demo_answers_all_three_queries(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["demo"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "\x1b[" not in out
    assert re.match(r"Indexed [6-9] sample files as \d+ chunks", out)
    sections = out.split("── Query: ")[1:]
    assert [section.splitlines()[0] for section in sections] == list(DEMO_QUERIES)
    prose, code, chinese = sections
    # The PDF postmortem answers the prose question, with its page.
    assert "1. Postmortem: checkout outage of 14 March" in prose
    assert "samples/checkout-outage-postmortem.pdf p." in prose
    # The code query finds the function, with its line range and symbol heading.
    assert "1. retry.py" in code
    assert "samples/retry.py:" in code and "§ retry_with_backoff" in code
    # The Chinese query finds the Chinese FAQ section.
    assert "1. 账户常见问题" in chinese
    assert "samples/zh-account-faq.md:" in chinese and "如何重置密码" in chinese
    # Nothing is left behind in the working folder.
    assert list(tmp_path.iterdir()) == []


def test_sample_pdf_extracts_to_text_on_every_page() -> None:
    with resources.as_file(SAMPLES / "checkout-outage-postmortem.pdf") as path:
        reader = PdfReader(path, strict=True)
        pages = [page.extract_text() for page in reader.pages]
    assert len(pages) == 3
    assert all(len(text) > 500 for text in pages)
    assert "connection pool" in pages[0] and "Root cause" in pages[1]
    assert reader.metadata is not None
    assert reader.metadata.title == "Postmortem: checkout outage of 14 March"


def test_sample_code_is_valid_documented_python() -> None:
    source = (SAMPLES / "retry.py").read_text(encoding="utf-8")
    tree = ast.parse(source)
    functions = [node for node in tree.body if isinstance(node, ast.FunctionDef)]
    assert {f.name for f in functions} >= {"retry_with_backoff", "backoff_delays"}
    assert all(ast.get_docstring(f) for f in functions)
    namespace: dict[str, object] = {}
    exec(compile(source, "retry.py", "exec"), namespace)
    calls = iter([TimeoutError(), ConnectionError(), "ok"])

    def flaky() -> str:
        outcome = next(calls)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    retry = namespace["retry_with_backoff"]
    assert retry(flaky, sleep=lambda seconds: None) == "ok"  # type: ignore[operator]


def test_the_original_samples_are_still_shipped() -> None:
    names = {entry.name for entry in SAMPLES.iterdir()}
    assert {
        "backup-runbook.md",
        "deploy-guide.md",
        "http-caching.md",
        "zh-account-faq.md",
        "checkout-outage-postmortem.pdf",
        "retry.py",
    } <= names


def test_samples_copy_from_a_zipped_package(tmp_path: Path) -> None:
    """importlib.resources may hand out a zip entry (an installed zip or wheel)."""
    archive = tmp_path / "pkg.zip"
    with zipfile.ZipFile(archive, "w") as zipped:
        for entry in SAMPLES.iterdir():
            zipped.writestr(f"knowledge_agent/samples/{entry.name}", entry.read_bytes())
    target = tmp_path / "copy"
    _copy_tree(zipfile.Path(archive, "knowledge_agent/samples/"), target)
    copied = sorted(path.name for path in target.iterdir())
    assert copied == sorted(entry.name for entry in SAMPLES.iterdir())
    assert (target / "retry.py").read_bytes() == (SAMPLES / "retry.py").read_bytes()
