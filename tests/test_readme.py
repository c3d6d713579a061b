"""The README's Python examples run as written."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "knowledge_agent" / "samples"
# Tests never use the network: a block that needs it says so on its first line. A block that
# needs a PostgreSQL server runs against the test server instead of the one it names.
ALL_BLOCKS = re.findall(
    r"```python\n(.*?)```", (ROOT / "README.md").read_text(encoding="utf-8"), re.S
)
BLOCKS = [block for block in ALL_BLOCKS if not block.startswith("# Needs")]
SERVER_BLOCKS = [block for block in ALL_BLOCKS if block.startswith("# Needs a PostgreSQL")]


@pytest.mark.parametrize("code", BLOCKS)
def test_readme_python_block_runs(
    code: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    shutil.copy(SAMPLES / "deploy-guide.md", tmp_path / "guide.md")
    shutil.copytree(SAMPLES, tmp_path / "docs")
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "README.md", "exec"), {})
    if "kb.search" in code:
        assert "Rolling back a failed deploy" in capsys.readouterr().out


@pytest.mark.parametrize("code", SERVER_BLOCKS)
def test_readme_server_block_runs_on_a_real_server(
    code: str, postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    named = re.findall(r'"(postgresql://[^"]+)"', code)
    assert named, "the block names no server"
    for url in set(named):
        code = code.replace(url, postgres_url)
    exec(compile(code, "README.md", "exec"), {})
    assert capsys.readouterr().out.strip() == "Release policy"


def test_readme_has_python_examples() -> None:
    assert len(BLOCKS) >= 2 and SERVER_BLOCKS
