"""Real git work trees for tests (no tests of their own): commits at fixed dates.

:class:`WorkTree` drives the ``git`` executable in a temporary folder, with the user's and
the system's git configuration shut out, and commits with ``GIT_AUTHOR_DATE`` and
``GIT_COMMITTER_DATE`` set, so a commit's date is the one the test gives.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from datetime import datetime
from pathlib import Path

import pytest

__all__ = ["WorkTree", "requires_git"]

requires_git = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


class WorkTree:
    """A git repository with a work tree at ``path``, on branch ``branch``."""

    def __init__(self, path: Path, branch: str = "main") -> None:
        self.path = path
        path.mkdir(parents=True, exist_ok=True)
        self.git("init", "-q", "-b", branch)

    def git(self, *args: str, date: datetime | None = None) -> str:
        """Run git in the work tree; its standard output."""
        environment = {
            **{k: v for k, v in os.environ.items() if not k.startswith("GIT_")},
            "GIT_CONFIG_GLOBAL": os.devnull,
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_AUTHOR_NAME": "Test",
            "GIT_AUTHOR_EMAIL": "test@example.org",
            "GIT_COMMITTER_NAME": "Test",
            "GIT_COMMITTER_EMAIL": "test@example.org",
        }
        if date is not None:
            environment["GIT_AUTHOR_DATE"] = environment["GIT_COMMITTER_DATE"] = date.isoformat()
        done = subprocess.run(
            ["git", *args],
            cwd=self.path,
            env=environment,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        return done.stdout

    def write(self, relative: str, text: str) -> Path:
        path = self.path / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return path

    def commit(self, message: str, date: datetime) -> str:
        """Stage everything and commit it at ``date``; the commit's id."""
        self.git("add", "-A")
        self.git("commit", "-q", "-m", message, date=date)
        return self.head()

    def head(self) -> str:
        return self.git("rev-parse", "HEAD").strip()
