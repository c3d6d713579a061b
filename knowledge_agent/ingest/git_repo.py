"""A local git work tree, read through the ``git`` executable: its commit and branch, the
files it tracks, what differs from a commit, and when each file was last committed.

Offline and read-only. Every command runs without a shell, with a timeout, as
``git -C <top> --no-optional-locks --literal-pathspecs`` (it never writes the repository's
index, and a file name is never a pattern), with the repository's ``core.fsmonitor`` hook
off (a folder's ``.git/config`` is data: it must not start a program) and without the
user's global excludes file, which the folder walk does not read either, so both agree on
which files there are. ``GIT_*`` variables of the caller's environment (``GIT_DIR``,
``GIT_INDEX_FILE`` …) are not passed on: the folder alone says which repository it is.

Paths are relative to the top of the work tree, with ``/`` separators, as git gives them
(bytes that are not UTF-8 decoded as the file system's names are, ``os.fsdecode``).
A command that fails raises :class:`GitError`.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import threading
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import IO

from knowledge_agent.errors import IngestError

__all__ = ["GIT_TIMEOUT", "LOG_TIMEOUT", "FileCommit", "GitError", "GitRepo", "find_git"]

logger = logging.getLogger(__name__)

GIT_TIMEOUT = 60.0
"""Seconds one git command may take (the history reader excepted)."""
LOG_TIMEOUT = 300.0
"""Seconds the history is read for last-commit dates; files not reached by then have none."""

_COMMIT_ID = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")  # SHA-1 or SHA-256
_HEADER = b"\x01"  # starts each commit of the history read (see _LogReader)
_READ_SIZE = 64 * 1024


class GitError(IngestError):
    """A git command failed or took too long; ``path`` is the work tree."""


def find_git() -> str | None:
    """The ``git`` executable on the PATH, or None."""
    return shutil.which("git")


@dataclass(frozen=True)
class FileCommit:
    """The last commit that changed a file, and when it was committed."""

    commit: str
    committed_at: datetime


def _environment() -> dict[str, str]:
    environment = {key: value for key, value in os.environ.items() if not key.startswith("GIT_")}
    environment["GIT_TERMINAL_PROMPT"] = "0"  # never ask for anything
    return environment


class GitRepo:
    """One work tree; ``top`` is its top folder as git reports it."""

    def __init__(self, git: str, top: str) -> None:
        self.git = git
        self.top = top

    @classmethod
    def discover(cls, folder: str, git: str | None = None) -> GitRepo | None:
        """The work tree ``folder`` lies in, or None when it lies in none (or git cannot
        tell: an unsafe owner, a damaged repository — logged)."""
        git = git or find_git()
        if git is None:
            return None
        try:
            done = subprocess.run(
                [git, "-C", folder, "rev-parse", "--is-inside-work-tree", "--show-toplevel"],
                capture_output=True,
                stdin=subprocess.DEVNULL,
                timeout=GIT_TIMEOUT,
                env=_environment(),
                check=False,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            logger.warning("%s: git could not run: %s", folder, exc)
            return None
        lines = os.fsdecode(done.stdout).splitlines()
        if done.returncode != 0 or len(lines) != 2 or lines[0] != "true":
            message = _first_line(done.stderr)
            if done.returncode != 0 and "not a git repository" not in message:
                logger.warning("%s: git says: %s", folder, message)
            return None
        return cls(git, lines[1])

    # -- commands -----------------------------------------------------------------------------

    def _command(self, *args: str) -> list[str]:
        return [
            self.git, "-C", self.top, "--no-optional-locks", "--literal-pathspecs",
            "-c", "core.fsmonitor=false", "-c", "core.excludesFile=", *args,
        ]  # fmt: skip

    def _run(
        self, *args: str, accept: Collection[int] = (0,)
    ) -> subprocess.CompletedProcess[bytes]:
        try:
            done = subprocess.run(
                self._command(*args),
                capture_output=True,
                stdin=subprocess.DEVNULL,
                timeout=GIT_TIMEOUT,
                env=_environment(),
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise GitError(self.top, f"git {args[0]} took more than {GIT_TIMEOUT:.0f} s") from exc
        except OSError as exc:
            raise GitError(self.top, f"git could not run: {exc}") from exc
        if done.returncode not in accept:
            raise GitError(self.top, f"git {args[0]} failed: {_first_line(done.stderr)}")
        return done

    def head(self) -> tuple[str | None, str]:
        """(the commit checked out, or None before the first commit; the branch, or "" on a
        detached head)."""
        commit = self._run("rev-parse", "--verify", "-q", "HEAD^{commit}", accept=(0, 1))
        branch = self._run("symbolic-ref", "-q", "--short", "HEAD", accept=(0, 1))
        sha = commit.stdout.decode("ascii", "replace").strip()
        name = os.fsdecode(branch.stdout.strip()) if branch.returncode == 0 else ""
        return (sha if commit.returncode == 0 and sha else None), name

    def has_commit(self, commit: str) -> bool:
        """Whether ``commit`` is still in the repository (a rebase and a garbage collection
        remove the commits they replaced)."""
        if not _COMMIT_ID.fullmatch(commit):
            return False
        done = self._run("cat-file", "-e", f"{commit}^{{commit}}", accept=(0, 1, 128))
        return done.returncode == 0

    def tracked(self, pathspec: str) -> set[str]:
        """The files under ``pathspec`` in the index (submodules as their folder)."""
        return _names(self._run("ls-files", "-z", "--", pathspec).stdout)

    def differing(self, pathspec: str, *, ignored: bool = False) -> set[str]:
        """Files under ``pathspec`` whose work-tree state is not the checked-out commit's:
        modified, staged, deleted or untracked; with ``ignored``, ignored files too."""
        done = self._run(
            "status", "--porcelain=v1", "-z", "--untracked-files=all", "--no-renames",
            *(["--ignored=traditional"] if ignored else []), "--", pathspec,
        )  # fmt: skip
        # Each entry is "XY path": two status letters and a space before the name.
        return {name[3:] for name in _names(done.stdout) if len(name) > 3}

    def changed_since(self, commit: str, pathspec: str) -> set[str]:
        """Files under ``pathspec`` that differ between ``commit`` and the work tree, each
        side of a rename counted (added, modified, deleted, renamed)."""
        if not _COMMIT_ID.fullmatch(commit):
            raise GitError(self.top, f"not a commit id: {commit!r}")
        done = self._run(
            "diff", "--name-only", "-z", "--no-renames", "--no-ext-diff", "--no-textconv",
            commit, "--", pathspec,
        )  # fmt: skip
        return _names(done.stdout)

    def history(self, pathspec: str) -> LastCommits:
        """When each file under ``pathspec`` was last committed, read as asked (close it)."""
        return LastCommits(self, pathspec)


class LastCommits:
    """The last commit of each file, from one ``git log`` read newest first, only as far as
    the files asked about need: :meth:`get` reads on until it has seen the file (or the
    history or :data:`LOG_TIMEOUT` ends) and remembers every file it passed on the way."""

    def __init__(self, repo: GitRepo, pathspec: str) -> None:
        self._repo = repo
        self._pathspec = pathspec
        self._found: dict[str, FileCommit] = {}
        self._process: subprocess.Popen[bytes] | None = None
        self._timer: threading.Timer | None = None
        self._entries: Iterator[tuple[str, FileCommit]] | None = None
        self._ended = False

    def get(self, path: str) -> FileCommit | None:
        """The last commit of ``path`` (relative to the top), None if the history has none."""
        if path in self._found:
            return self._found[path]
        for name, commit in self._read():
            self._found.setdefault(name, commit)
            if name == path:
                return commit
        return None

    def close(self) -> None:
        """Stop reading: end the git process (idempotent)."""
        self._ended = True
        if self._timer is not None:
            self._timer.cancel()
        process, self._process = self._process, None
        if process is not None:
            if process.poll() is None:
                process.kill()
            process.wait()
            if process.stdout is not None:
                process.stdout.close()

    def _read(self) -> Iterator[tuple[str, FileCommit]]:
        if self._ended:
            return iter(())
        if self._entries is None:
            self._entries = self._start()
        return self._entries

    def _start(self) -> Iterator[tuple[str, FileCommit]]:
        command = self._repo._command(
            "log", "-z", "--format=%x01%H%x00%cI", "--name-only", "--no-renames", "HEAD",
            "--", self._pathspec,
        )  # fmt: skip
        try:
            self._process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                env=_environment(),
            )
        except OSError as exc:
            logger.warning("%s: git log could not run: %s", self._repo.top, exc)
            self._ended = True
            return
        # A history too long to read in time: the files not reached get no date.
        self._timer = threading.Timer(LOG_TIMEOUT, self._time_out)
        self._timer.daemon = True
        self._timer.start()
        assert self._process.stdout is not None
        try:
            yield from _parse_log(self._process.stdout)
        finally:
            self.close()

    def _time_out(self) -> None:
        logger.warning(
            "%s: reading the history took more than %.0f s; files not reached by then have "
            "no commit date",
            self._repo.top,
            LOG_TIMEOUT,
        )
        process = self._process
        if process is not None and process.poll() is None:
            process.kill()


def _parse_log(stream: IO[bytes]) -> Iterator[tuple[str, FileCommit]]:
    """(file, its commit) for each file name of ``git log -z --format=%x01%H%x00%cI
    --name-only``: ``\\x01<id>\\0<date>\\0`` then, after a line break, the commit's file
    names each ending in ``\\0``."""
    tail = b""
    header: bytes | None = None  # the id whose date comes next
    current: FileCommit | None = None
    while block := stream.read(_READ_SIZE):
        tokens = (tail + block).split(b"\0")
        tail = tokens.pop()
        for token in tokens:
            if header is not None:
                committed = _iso_time(token.decode("ascii", "replace"))
                current = None if committed is None else FileCommit(header.decode(), committed)
                header = None
                continue
            if token.startswith(b"\n"):
                token = token[1:]
            if token.startswith(_HEADER) and _COMMIT_ID.fullmatch(token[1:].decode("latin-1")):
                header = token[1:]
            elif token and current is not None:
                yield os.fsdecode(token), current


def _iso_time(text: str) -> datetime | None:
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def _names(output: bytes) -> set[str]:
    """The NUL-terminated entries of a ``-z`` output."""
    return {os.fsdecode(name) for name in output.split(b"\0") if name}


def _first_line(stderr: bytes) -> str:
    text = stderr.decode("utf-8", "replace").strip()
    return text.splitlines()[0][:200] if text else "no message"
