"""A collected folder inside a git work tree: what changed since the last run, asked of git.

Collecting a folder that lies in a git work tree records, with the folder, the commit
checked out, the branch, and the files that differed from that commit (edited, staged,
untracked): :class:`GitState`, kept in the root's options under :data:`GIT_STATE`. The next
run asks git instead of looking at every file: the files that differ between the recorded
commit and the work tree (``git diff OLD``: commits since, and edits not committed), those
that differ from the commit checked out now (``git status``: untracked files too), those
that differed last time (an edit undone since shows in neither), and those whose reading
failed last time (a walk tries them again too). Only these are looked at; each goes
through the folder walk's own rules (excludes, hidden files, ``.gitignore``:
:func:`~knowledge_agent.ingest.walker.is_included`), so both ways index the same files.
When the folder is below the top of the work tree (or its ``.git`` is a file: a linked work
tree, a submodule), the ignored files under it are listed too: the walk does not read the
ignore files above its folder, nor the exclude file of such a ``.git``.

The folder is walked as usual instead (and why is logged) when no state was recorded, its
walk options changed (the caller's part: files git does not list may be in or out), the
recorded commit is gone (a rebase or a forced update, then garbage collection), a
``.gitignore`` or the root's ``.git/info/exclude`` changed (the files a walk keeps may then
change anywhere), the walk does not follow ``.gitignore``, more than
:data:`MAX_DIFFERING` files differed last time, or git is missing or fails.

Every file's item is dated by its last commit (:meth:`GitRoot.stamp`): ``updated_at`` is
the commit's date, so the date filters select by it, and ``metadata`` gets ``git_commit``
and ``git_committed_at``. A file with changes not committed (or not tracked) keeps the
collection time, as a file of a plain folder does.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import timezone
from pathlib import Path
from types import TracebackType

from knowledge_agent.ingest.collector import FileStamp
from knowledge_agent.ingest.git_repo import GitError, GitRepo, LastCommits, find_git
from knowledge_agent.ingest.git_state import GitState
from knowledge_agent.ingest.walker import FoundFile, WalkOptions, _Checker

__all__ = ["MAX_DIFFERING", "GitChanges", "GitRoot"]

logger = logging.getLogger(__name__)

MAX_DIFFERING = 10_000
"""Files differing from the commit that a state lists at most; with more, the next run
walks the folder."""

_GITIGNORE = ".gitignore"


@dataclass(frozen=True)
class GitChanges:
    """The files a run looks at: those to read again (present and included) and those to
    remove (gone, or no longer included)."""

    changed: list[Path]
    deleted: list[Path]


TrackedUnder = Callable[[str], Iterable[str]]
"""``tracked_under(path)``: the tracked sources of the root at ``path`` or under it."""
Failed = Callable[[], Iterable[str]]
"""``failed()``: the tracked sources of the root whose last reading failed."""


class GitRoot:
    """A folder being collected that lies in a git work tree; close it after the run."""

    def __init__(self, repo: GitRepo, root: str, options: WalkOptions) -> None:
        self.repo = repo
        self.root = root
        relative = os.path.relpath(os.path.realpath(root), os.path.realpath(repo.top))
        below = relative != os.curdir
        self.pathspec = relative.replace(os.sep, "/") if below else "."
        self.prefix = self.pathspec + "/" if below else ""  # of the root's paths from the top
        self.commit, self.branch = repo.head()
        # The walk reads no ignore file above the root, nor the exclude file of a .git that
        # is a file (a linked work tree, a submodule): what git ignores there, it may keep.
        own_rules = not below and os.path.isdir(os.path.join(root, ".git"))
        self.differing = repo.differing(self.pathspec, ignored=not own_rules)
        self.tracked = repo.tracked(self.pathspec)
        self.excludes = _stat(os.path.join(root, ".git", "info", "exclude"))
        self._checker = _Checker(root, options)
        self._history: LastCommits | None = None

    @classmethod
    def open(cls, root: str, options: WalkOptions) -> GitRoot | None:
        """The git view of ``root``; None when it is no folder in a work tree, or git is
        missing or fails (logged: the folder is walked as any other)."""
        if not os.path.isdir(root):
            return None
        git = find_git()
        if git is None:
            if _in_work_tree(root):
                logger.warning(
                    "%s is in a git work tree but git is not installed: walking it", root
                )
            return None
        repo = GitRepo.discover(root, git)
        if repo is None:
            return None
        try:
            return cls(repo, root, options)
        except GitError as exc:
            logger.warning("%s; walking the folder", exc)
            return None

    def __enter__(self) -> GitRoot:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """End the history reader, if one was started."""
        if self._history is not None:
            self._history.close()

    def state(self) -> GitState:
        """What this run saw, for the next one."""
        overflow = len(self.differing) > MAX_DIFFERING
        differing = () if overflow else tuple(sorted(self.differing))
        return GitState(self.commit, self.branch, differing, overflow, self.excludes)

    def changes(
        self,
        previous: GitState | None,
        options: WalkOptions,
        tracked_under: TrackedUnder,
        failed: Failed,
    ) -> GitChanges | None:
        """The files that may have changed since ``previous`` was recorded, and those that
        failed last time (as a walk, which tries them again); None when the folder must be
        walked (the reason is logged, unless nothing was recorded)."""
        if previous is None:
            return None
        try:
            reason = self._walk_reason(previous, options)
            if not reason:
                assert previous.commit is not None
                names = self.repo.changed_since(previous.commit, self.pathspec)
                names |= self.differing | set(previous.differing)
                if any(name.rsplit("/", 1)[-1] == _GITIGNORE for name in names):
                    reason = "a .gitignore changed"
        except GitError as exc:
            reason = str(exc)
        if reason:
            logger.info("%s: %s; walking the folder", self.root, reason)
            return None
        changed: list[Path] = []
        deleted: list[Path] = []
        paths = {
            os.path.join(self.root, *name[len(self.prefix) :].split("/"))
            for name in names
            if name.startswith(self.prefix)
        }
        for path in sorted(paths.union(failed())):
            if os.path.isdir(path) and not os.path.islink(path):
                # A submodule (git lists it, not the files in it): what the walk finds there.
                found = {str(file.path) for file in self._checker.walk_below(path)}
                changed.extend(Path(p) for p in sorted(found))
                deleted.extend(Path(p) for p in tracked_under(path) if p not in found)
            elif os.path.lexists(path) and self._checker.included(path):
                changed.append(Path(path))
            else:
                deleted.extend(Path(p) for p in tracked_under(path))
        logger.info(
            "%s: git lists %d changed and %d removed files", self.root, len(changed), len(deleted)
        )
        return GitChanges(changed, deleted)

    def _walk_reason(self, previous: GitState, options: WalkOptions) -> str:
        """Why the folder must be walked rather than asking git; "" when git can answer."""
        if previous.commit is None:
            return "the last run saw no commit"
        if not options.respect_gitignore:
            return "its walk does not follow .gitignore, which git's lists do"
        if previous.overflow:
            return f"more than {MAX_DIFFERING:,} files differed from the last commit"
        if previous.excludes != self.excludes:
            return ".git/info/exclude changed"
        if not self.repo.has_commit(previous.commit):
            return (
                f"the commit of the last run, {previous.commit[:12]}, is gone "
                "(a rebase or a forced update?)"
            )
        return ""

    def stamp(self, file: FoundFile) -> FileStamp | None:
        """The date and commit of a file's last commit; None for a file with changes not
        committed, or not tracked."""
        name = self.prefix + file.relative
        if name in self.differing or name not in self.tracked:
            return None
        if self._history is None:
            self._history = self.repo.history(self.pathspec)
        last = self._history.get(name)
        if last is None:
            return None
        return FileStamp(
            last.committed_at.astimezone(timezone.utc),  # stored times are all UTC
            {"git_commit": last.commit, "git_committed_at": last.committed_at.isoformat()},
        )


def _stat(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns


def _in_work_tree(folder: str) -> bool:
    """Whether ``folder`` or a folder above it holds a ``.git`` (the git-less guess)."""
    current = os.path.abspath(folder)
    while True:
        if os.path.lexists(os.path.join(current, ".git")):
            return True
        parent = os.path.dirname(current)
        if parent == current:
            return False
        current = parent
