"""The README's Python examples run as written."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "knowledge_agent" / "samples"
# Tests never use the network: a block that needs it says so on its first line.
BLOCKS = [
    block
    for block in re.findall(
        r"```python\n(.*?)```", (ROOT / "README.md").read_text(encoding="utf-8"), re.S
    )
    if not block.startswith("# Needs the network")
]


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


def test_readme_has_python_examples() -> None:
    assert len(BLOCKS) >= 2
