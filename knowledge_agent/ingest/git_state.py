"""What a run over a folder in a git work tree saw, kept for the next run
(:mod:`knowledge_agent.ingest.git_sync`) in the root's options under :data:`GIT_STATE`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["GIT_STATE", "GitState", "git_state_of"]

GIT_STATE = "git"
"""The key of a root's options that holds its :class:`GitState`."""


@dataclass(frozen=True)
class GitState:
    """What a run saw of the work tree: the commit checked out (None before the first),
    the branch ("" on a detached head), the files differing from the commit (relative to
    the top of the work tree), and the size and time of the root's ``.git/info/exclude``."""

    commit: str | None
    branch: str
    differing: tuple[str, ...] = ()
    overflow: bool = False  # too many differed to list (none are)
    excludes: tuple[int, int] | None = None

    def label(self) -> str:
        """``main@1a2b3c4d`` (``detached`` without a branch, ``none`` before a commit)."""
        return f"{self.branch or 'detached'}@{(self.commit or 'none')[:8]}"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (how the root's options keep it)."""
        return {
            "commit": self.commit,
            "branch": self.branch,
            "differing": list(self.differing),
            "overflow": self.overflow,
            "excludes": list(self.excludes) if self.excludes else None,
        }

    @classmethod
    def from_dict(cls, data: object) -> GitState | None:
        """The state :meth:`to_dict` made, or None for anything else (the folder is walked)."""
        if not isinstance(data, Mapping):
            return None
        commit, branch = data.get("commit"), data.get("branch", "")
        differing, excludes = data.get("differing", []), data.get("excludes")
        if not (commit is None or isinstance(commit, str)) or not isinstance(branch, str):
            return None
        if not isinstance(differing, list) or not all(isinstance(n, str) for n in differing):
            return None
        if excludes is not None and not (
            isinstance(excludes, list)
            and len(excludes) == 2
            and all(isinstance(n, int) for n in excludes)
        ):
            return None
        return cls(
            commit,
            branch,
            tuple(differing),
            bool(data.get("overflow", False)),
            (excludes[0], excludes[1]) if excludes else None,
        )


def git_state_of(options: Mapping[str, Any]) -> GitState | None:
    """The git state recorded in a root's options, if any."""
    return GitState.from_dict(options.get(GIT_STATE))
