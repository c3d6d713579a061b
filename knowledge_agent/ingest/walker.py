"""File discovery for folder ingest: which files under a root should be indexed.

``walk(root)`` yields every file a folder ingest should look at, in a deterministic order
(sorted by relative path), and ``is_included(root, path)`` answers the same question for one
path (the watcher uses it for single changed files). Both share one rule engine, so they agree:

1. dot-files and dot-folders are skipped unless ``include_hidden`` (``.gitignore`` never
   yielded);
2. the default excludes (``DEFAULT_EXCLUDES``: build output, caches, VCS folders; and
   by content, virtualenvs — any folder holding a ``pyvenv.cfg`` — and built documentation
   sites — any folder holding a ``sitemap.xml.gz``, as MkDocs' ``site/``) plus the caller's
   ``exclude`` patterns, one gitignore-style list relative to the root, so a caller's
   ``!dist/`` can re-include a default (a folder skipped for what it holds is collected
   when named as the root itself, or with ``use_default_excludes=False``);
3. ``.gitignore`` files in the root and every subfolder, each applying to its own folder, the
   deepest deciding, plus ``.git/info/exclude`` of the root as the weakest level;
4. for files only: when ``include`` patterns are given, the file must match one of them;
   files that are not text to search (images, fonts, media, archives, lock files, source
   maps, minified bundles) or not documents (templates, a static site's host settings such
   as ``CNAME``): ``NON_TEXT_EXCLUDES``, are skipped with the default excludes unless an
   ``include`` pattern names them. ``walk(..., on_excluded=...)`` hears of each
   file left out this way, with its kind, so a run can report what it did not read.

Excluded folders are pruned, never descended into, so a gitignore negation cannot re-include a
file inside an excluded folder (as in git). Pattern matching is ``pathspec``'s GitIgnoreSpec
(screened: see ``screened_spec``).

Symlinks whose real target lies inside the root (the root's real path) are followed once:
every real directory and file is visited at most once, the first in walk order wins, so a link
loop terminates and a second link to a visited file is not yielded again. Hard links to one
file count as the same file. A link whose target lies outside the root is not followed (as
ripgrep and fd do) and is reported to ``on_excluded`` with the kind ``LINK_OUTSIDE``, unless
``follow_outside_links``; with ``follow_symlinks=False`` every symlink is skipped, silently.
"""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from pathspec import GitIgnoreSpec

from knowledge_agent.errors import ConfigError, IngestError
from knowledge_agent.ingest.screened_spec import ScreenedSpec
from knowledge_agent.patterns import gitignore_problem

__all__ = [
    "DEFAULT_EXCLUDES",
    "LINK_OUTSIDE",
    "NON_TEXT_EXCLUDES",
    "NON_TEXT_KINDS",
    "ExcludedCallback",
    "FoundFile",
    "WalkOptions",
    "is_included",
    "walk",
]

logger = logging.getLogger(__name__)

DEFAULT_EXCLUDES: tuple[str, ...] = (
    # version control
    ".git/",
    ".hg/",
    ".svn/",
    # dependencies, environments and build output
    "node_modules/",
    "bower_components/",
    "dist/",
    "build/",
    # documentation sites built from the sources beside them (Sphinx, Jekyll)
    "_build/",
    "_site/",
    "__pycache__/",
    "__pypackages__/",
    ".venv/",
    "venv/",
    "site-packages/",
    "*.egg-info/",
    ".eggs/",
    ".tox/",
    ".nox/",
    # tool caches and editor settings
    ".mypy_cache/",
    ".pytest_cache/",
    ".ruff_cache/",
    ".idea/",
    ".vscode/",
    # generated or junk files (minified bundles and source maps: NON_TEXT_KINDS)
    "*.pyc",
    "*.pyo",
    "*.swp",
    "*.swo",
    "*~",
    ".DS_Store",
    "Thumbs.db",
)
"""Gitignore-style patterns skipped by default (``WalkOptions.use_default_excludes``)."""

NON_TEXT_KINDS: dict[str, tuple[str, ...]] = {
    # SVG is text, but drawing instructions, not documentation
    "image": (
        "*.svg", "*.png", "*.jpg", "*.jpeg", "*.gif", "*.ico", "*.webp", "*.bmp", "*.tif",
        "*.tiff", "*.avif", "*.heic", "*.psd",
    ),
    "font": ("*.woff", "*.woff2", "*.ttf", "*.otf", "*.eot"),
    "media": (
        "*.mp3", "*.wav", "*.ogg", "*.flac", "*.m4a", "*.aac", "*.mp4", "*.m4v", "*.mov",
        "*.avi", "*.mkv", "*.webm",
    ),
    "archive": (
        "*.zip", "*.tar", "*.gz", "*.tgz", "*.bz2", "*.xz", "*.zst", "*.7z", "*.rar", "*.whl",
        "*.jar", "*.deb", "*.rpm", "*.dmg", "*.iso",
    ),
    # generated, long, and full of hashes
    "lock file": (
        "package-lock.json", "npm-shrinkwrap.json", "yarn.lock", "pnpm-lock.yaml",
        "poetry.lock", "Pipfile.lock", "uv.lock", "Cargo.lock", "composer.lock", "Gemfile.lock",
        "go.sum",
    ),
    # generated from sources that are collected themselves
    "source map": ("*.map",),
    "minified": ("*.min.js", "*.min.css"),
    # what a page is made from, not what it says: Jinja files, and the HTML of a theme's
    # overrides (MkDocs' custom_dir) and template folders (Sphinx, Flask, Django)
    "template": (
        "*.jinja", "*.jinja2", "*.j2", "**/overrides/**/*.html", "**/_templates/**/*.html",
        "**/templates/**/*.html",
    ),
    # a static site's host settings: its domain (GitHub Pages), redirects and headers
    "site setting": ("CNAME", "_redirects", "_headers"),
}  # fmt: skip
"""Files that are not text to search, by kind: skipped by default like ``DEFAULT_EXCLUDES`` —
but a file an ``include`` pattern names is collected all the same (``include=("*.svg",)``)."""

NON_TEXT_EXCLUDES: tuple[str, ...] = tuple(
    pattern for patterns in NON_TEXT_KINDS.values() for pattern in patterns
)
"""Every pattern of ``NON_TEXT_KINDS``."""

LINK_OUTSIDE = "link outside"
"""The kind ``walk`` reports for a symlink it did not follow because it leaves the root."""

ExcludedCallback = Callable[[str, str], None]
"""``on_excluded(relative_path, kind)``: a file ``walk`` left out as not text (a
``NON_TEXT_KINDS`` key), or a link leaving the root (``LINK_OUTSIDE``)."""

_GITIGNORE = ".gitignore"
# A folder holding one of these is skipped with the default excludes (never the root): a
# virtualenv, and a site built from documents (MkDocs writes sitemap.xml.gz into it).
_FOLDER_MARKERS = frozenset({"pyvenv.cfg", "sitemap.xml.gz"})


@dataclass(frozen=True)
class WalkOptions:
    """What ``walk`` yields; every pattern is gitignore-style and relative to the root.

    ``include`` empty means every file; ``exclude`` adds to ``DEFAULT_EXCLUDES`` (unless
    ``use_default_excludes`` is false). Files bigger than ``max_file_size`` bytes are still
    yielded, flagged ``too_large``, so the caller can report them as skipped.
    ``follow_symlinks`` false skips every symlink; true follows those whose real target
    lies inside the root, and those leaving it too only with ``follow_outside_links``.
    """

    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    use_default_excludes: bool = True
    respect_gitignore: bool = True
    include_hidden: bool = False
    max_file_size: int = 20 * 1024 * 1024
    follow_symlinks: bool = True
    follow_outside_links: bool = False

    def __post_init__(self) -> None:
        # Frozen: normalise through object.__setattr__ (lists become tuples).
        for name in ("include", "exclude"):
            object.__setattr__(self, name, _pattern_tuple(name, getattr(self, name)))
        flags = (
            "use_default_excludes",
            "respect_gitignore",
            "include_hidden",
            "follow_symlinks",
            "follow_outside_links",
        )
        for name in flags:
            value = getattr(self, name)
            if not isinstance(value, bool):
                raise ConfigError(f"{name} must be True or False, got {value!r}")
        size = self.max_file_size
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise ConfigError(f"max_file_size must be a non-negative number of bytes, got {size!r}")
        # Compile once here so a bad pattern fails at construction, naming its field.
        _compile("include", self.include)
        _compile("exclude", self.exclude)


@dataclass(frozen=True)
class FoundFile:
    """One file found by ``walk``.

    ``path`` is absolute as reached under the root (``os.path.abspath``, symlinks not
    resolved); ``relative`` is the posix path relative to the root (the file name for a
    single-file root).
    """

    path: Path
    relative: str
    size: int
    mtime_ns: int
    too_large: bool


def walk(
    root: str | os.PathLike[str],
    options: WalkOptions | None = None,
    *,
    on_excluded: ExcludedCallback | None = None,
) -> Iterator[FoundFile]:
    """Yield the files under ``root`` that a folder ingest should read, sorted by relative path.

    ``root`` may be a folder or a single file; an explicitly named file is yielded whatever the
    include/exclude rules say (only the size flag applies). A missing root raises
    ``IngestError`` at once; unreadable subfolders are logged and skipped. ``on_excluded``
    is called, in walk order, for each file left out as not text (see ``NON_TEXT_KINDS``)
    and each link not followed because it leaves the root (``LINK_OUTSIDE``).
    """
    options = _options(options)
    root_abs = os.path.abspath(os.fspath(root))
    try:
        st = os.stat(root_abs)
    except FileNotFoundError as exc:
        raise IngestError(str(root), "no such file or directory") from exc
    except OSError as exc:
        raise IngestError(str(root), exc.strerror or str(exc)) from exc
    if stat.S_ISDIR(st.st_mode):
        return _walk_root(root_abs, str(root), options, on_excluded)
    if not stat.S_ISREG(st.st_mode):
        raise IngestError(str(root), "not a regular file or directory")
    found = FoundFile(
        path=Path(root_abs),
        relative=os.path.basename(root_abs),
        size=st.st_size,
        mtime_ns=st.st_mtime_ns,
        too_large=st.st_size > options.max_file_size,
    )
    return iter((found,))


def is_included(
    root: str | os.PathLike[str], path: str | os.PathLike[str], options: WalkOptions
) -> bool:
    """Would ``walk(root, options)`` yield ``path``?

    Checks the rules along the path only (reading the ``.gitignore`` files on the way), so it
    is cheap for one file. One difference from ``walk``: it does not know whether another link
    to the same real file or folder comes earlier in walk order, so a duplicate reached through
    a second symlink is reported as included.
    """
    return _Checker(root, _options(options)).included(path)


# --------------------------------------------------------------------------------------------
# rules


def _options(options: WalkOptions | None) -> WalkOptions:
    """The options to use; ConfigError for anything but a WalkOptions (or None)."""
    if options is None:
        return WalkOptions()
    if not isinstance(options, WalkOptions):
        raise ConfigError(f"options must be a WalkOptions, got {options!r}")
    return options


def _pattern_tuple(name: str, value: object) -> tuple[str, ...]:
    """Validate a pattern list and return it as a tuple of strings."""
    if isinstance(value, (str, bytes)):
        raise ConfigError(f'{name} must be a list of patterns such as ("*.md",), not {value!r}')
    if not isinstance(value, Iterable):
        raise ConfigError(f"{name} must be a list of patterns, got {value!r}")
    patterns = tuple(value)
    for pattern in patterns:
        if not isinstance(pattern, str):
            raise ConfigError(f"{name} patterns must be strings, got {pattern!r}")
        problem = gitignore_problem(pattern)
        if problem is not None:
            raise ConfigError(f"{name} pattern {pattern!r:.80} is refused: {problem}")
    return patterns


def _compile(name: str, patterns: Iterable[str]) -> ScreenedSpec:
    """Compile user patterns, mapping pathspec's errors to ConfigError."""
    try:
        return ScreenedSpec(GitIgnoreSpec.from_lines(list(patterns)))
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"{name}: invalid pattern: {exc}") from exc


def _compile_file_lines(source: str, lines: list[str]) -> GitIgnoreSpec | None:
    """Compile a .gitignore file; a bad line, or one too slow to match, is logged and
    dropped, never fatal (the file comes with the folder: it is data, not settings)."""
    for line in lines:
        problem = gitignore_problem(line)
        if problem is not None:
            logger.warning("%s: ignoring pattern %r: %s", source, line[:80], problem)
    lines = [line for line in lines if gitignore_problem(line) is None]
    try:
        return GitIgnoreSpec.from_lines(lines)
    except (ValueError, TypeError):
        good = []
        for line in lines:
            try:
                GitIgnoreSpec.from_lines([line])
            except (ValueError, TypeError) as exc:
                logger.warning("%s: ignoring invalid pattern %r: %s", source, line, exc)
            else:
                good.append(line)
        return GitIgnoreSpec.from_lines(good) if good else None


def _read_ignore_file(path: str) -> ScreenedSpec | None:
    """Read one ignore file (``.gitignore`` or ``info/exclude``); None if absent or empty."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            lines = handle.read().splitlines()
    except FileNotFoundError:
        return None
    except OSError as exc:
        logger.warning("cannot read %s: %s", path, exc)
        return None
    spec = _compile_file_lines(path, lines)
    return ScreenedSpec(spec) if spec is not None and len(spec) else None


@dataclass(frozen=True)
class _Level:
    """One ignore file: ``prefix`` is its folder relative to the root, "" or ending in "/"."""

    prefix: str
    spec: ScreenedSpec


class _Rules:
    """The compiled form of a WalkOptions: answers "skip this entry?" for walk and is_included."""

    def __init__(self, options: WalkOptions) -> None:
        self.options = options
        excludes = (DEFAULT_EXCLUDES if options.use_default_excludes else ()) + options.exclude
        self.exclude = _compile("exclude", excludes) if excludes else None
        self.include = _compile("include", options.include) if options.include else None
        self.non_text = (
            _compile("exclude", NON_TEXT_EXCLUDES) if options.use_default_excludes else None
        )
        # The kind of each NON_TEXT_EXCLUDES pattern, by its index (what check returns).
        self.non_text_kinds = [kind for kind, patterns in NON_TEXT_KINDS.items() for _ in patterns]

    def root_levels(self, root_abs: str) -> tuple[_Level, ...]:
        """The ignore levels that apply at the root: info/exclude (weakest), then .gitignore."""
        if not self.options.respect_gitignore:
            return ()
        levels: list[_Level] = []
        info = _read_ignore_file(os.path.join(root_abs, ".git", "info", "exclude"))
        if info is not None:
            levels.append(_Level("", info))
        own = _read_ignore_file(os.path.join(root_abs, _GITIGNORE))
        if own is not None:
            levels.append(_Level("", own))
        return tuple(levels)

    def child_levels(
        self, dir_abs: str, prefix: str, levels: tuple[_Level, ...]
    ) -> tuple[_Level, ...]:
        """``levels`` plus the .gitignore of a subfolder (``prefix`` = its relative path + "/")."""
        if not self.options.respect_gitignore:
            return levels
        spec = _read_ignore_file(os.path.join(dir_abs, _GITIGNORE))
        return levels if spec is None else (*levels, _Level(prefix, spec))

    def skips(self, name: str, rel: str, is_dir: bool, levels: tuple[_Level, ...]) -> bool:
        """Whether an entry below the root is left out (folders: pruned with all they hold)."""
        return self.verdict(name, rel, is_dir, levels) is not None

    def verdict(self, name: str, rel: str, is_dir: bool, levels: tuple[_Level, ...]) -> str | None:
        """Why an entry is left out: None when it is kept, a ``NON_TEXT_KINDS`` key for a
        file left out only as not text, else ""."""
        if name.startswith(".") and not self.options.include_hidden:
            return ""
        if name == _GITIGNORE and not is_dir:
            return ""  # a rule file, never content, even with include_hidden
        probe = rel + "/" if is_dir else rel  # a trailing slash lets "build/" match folders only
        if self.exclude is not None and self.exclude.check(probe)[0]:
            return ""
        # The deepest .gitignore with an opinion decides (git's precedence).
        for level in reversed(levels):
            verdict = level.spec.check(probe[len(level.prefix) :])[0]
            if verdict is not None:
                if verdict:
                    return ""
                break
        if is_dir:
            return None
        if self.include is not None and not self.include.check(rel)[0]:
            return ""  # outside what was asked for: not worth reporting as not text
        if self.non_text is not None and self.include is None:  # an include pattern lets it in
            excluded, index = self.non_text.check(rel)
            if excluded:
                return "" if index is None else self.non_text_kinds[index]
        return None


# --------------------------------------------------------------------------------------------
# walking


def _identity(path: str, st: os.stat_result | None = None) -> tuple[int, int] | None:
    """(device, inode) of the real file behind ``path``; None where the OS gives no inode."""
    if st is None or st.st_ino == 0:  # DirEntry.stat() on Windows leaves st_ino at 0
        try:
            st = os.stat(path)
        except OSError:
            return None
    return (st.st_dev, st.st_ino) if st.st_ino else None


@dataclass
class _Frame:
    """A folder on the walk stack: its sorted entries not yet handled."""

    prefix: str
    levels: tuple[_Level, ...]
    entries: Iterator[tuple[os.DirEntry[str], bool]]


def _walk_root(
    root_abs: str, shown: str, options: WalkOptions, on_excluded: ExcludedCallback | None
) -> Iterator[FoundFile]:
    """Walk a root folder (the generator behind ``walk``)."""
    rules = _Rules(options)
    visited: set[tuple[int, int]] = set()
    ident = _identity(root_abs)
    if ident is not None:
        visited.add(ident)
    try:
        entries = _scan(root_abs, options, at_root=True, strict=True)
    except OSError as exc:
        raise IngestError(shown, exc.strerror or str(exc)) from exc
    levels = rules.root_levels(root_abs)
    confined = _confinement(root_abs, options)
    yield from _walk_from(root_abs, "", levels, entries, rules, visited, on_excluded, confined)


def _confinement(root_abs: str, options: WalkOptions) -> str | None:
    """The real path that followed links must stay under; None when links are not checked
    (all skipped, or all followed)."""
    if not options.follow_symlinks or options.follow_outside_links:
        return None
    return os.path.normcase(os.path.realpath(root_abs))


def _leaves(path: str, root_real: str) -> bool:
    """Whether ``path``, symlinks resolved, lies outside ``root_real`` (see _confinement)."""
    real = os.path.normcase(os.path.realpath(path))
    return real != root_real and not real.startswith(root_real.rstrip(os.sep) + os.sep)


def _walk_from(
    dir_abs: str,
    prefix: str,
    levels: tuple[_Level, ...],
    entries: list[tuple[os.DirEntry[str], bool]] | None,
    rules: _Rules,
    visited: set[tuple[int, int]],
    on_excluded: ExcludedCallback | None = None,
    confined: str | None = None,
) -> Iterator[FoundFile]:
    """Depth-first walk from one folder whose entries are already scanned; with
    ``confined`` (see ``_confinement``), links leaving it are reported, not followed.

    An explicit stack instead of recursion: deep trees neither hit the recursion limit nor pay
    a ``yield from`` chain per file.
    """
    if entries is None:
        return
    options = rules.options
    stack = [_Frame(prefix, levels, iter(entries))]
    while stack:
        frame = stack[-1]
        item = next(frame.entries, None)
        if item is None:
            stack.pop()
            continue
        entry, is_dir = item
        rel = frame.prefix + entry.name
        verdict = rules.verdict(entry.name, rel, is_dir, frame.levels)
        if verdict is not None:
            if verdict and on_excluded is not None:
                on_excluded(rel, verdict)
            continue
        if confined is not None and entry.is_symlink() and _leaves(entry.path, confined):
            if on_excluded is not None:
                on_excluded(rel, LINK_OUTSIDE)
            continue
        if is_dir:
            ident = _identity(entry.path)
            if ident is not None:
                if ident in visited:
                    continue  # a link loop, or a second way into a folder already walked
                visited.add(ident)
            children = _scan(entry.path, options, at_root=False, strict=False)
            if children is None:
                continue
            child_prefix = rel + "/"
            child_levels = rules.child_levels(entry.path, child_prefix, frame.levels)
            stack.append(_Frame(child_prefix, child_levels, iter(children)))
            continue
        try:
            st = entry.stat()
        except OSError as exc:  # vanished, or a dangling link
            logger.debug("skipping %s: %s", entry.path, exc)
            continue
        if not stat.S_ISREG(st.st_mode):
            continue  # sockets, FIFOs and devices are never content
        ident = _identity(entry.path, st)
        if ident is not None:
            if ident in visited:  # files and folders share one identity set
                continue
            visited.add(ident)
        yield FoundFile(
            path=Path(entry.path),
            relative=rel,
            size=st.st_size,
            mtime_ns=st.st_mtime_ns,
            too_large=st.st_size > options.max_file_size,
        )


def _scan(
    dir_abs: str, options: WalkOptions, *, at_root: bool, strict: bool
) -> list[tuple[os.DirEntry[str], bool]] | None:
    """List a folder as (entry, is_dir) sorted in walk order; None when it is skipped.

    Sorting folders by ``name + "/"`` makes depth-first order equal to sorting the full
    relative paths. A folder holding ``pyvenv.cfg`` is a virtualenv (default excludes only;
    the root itself is never skipped: it was named explicitly). With ``strict`` an unreadable
    folder raises; otherwise it is logged and skipped.
    """
    try:
        with os.scandir(dir_abs) as scanner:
            raw = list(scanner)
    except OSError as exc:
        if strict:
            raise
        logger.warning("skipping unreadable folder %s: %s", dir_abs, exc)
        return None
    keyed: list[tuple[str, os.DirEntry[str], bool]] = []
    for entry in raw:
        try:
            if (
                entry.name in _FOLDER_MARKERS
                and not at_root
                and options.use_default_excludes
                and entry.is_file()
            ):
                logger.debug("skipping %s: it holds %s", dir_abs, entry.name)
                return None
            if entry.is_symlink() and not options.follow_symlinks:
                continue
            is_dir = entry.is_dir()
        except OSError as exc:
            logger.debug("skipping %s: %s", entry.path, exc)
            continue
        keyed.append((entry.name + "/" if is_dir else entry.name, entry, is_dir))
    keyed.sort(key=lambda item: item[0])
    return [(entry, is_dir) for _, entry, is_dir in keyed]


class _Checker:
    """Rule checks for single paths under one root, caching each folder's verdict.

    Reused by the watcher for one batch of changes; a new checker sees edited .gitignore files.
    """

    def __init__(self, root: str | os.PathLike[str], options: WalkOptions) -> None:
        self.root = os.path.abspath(os.fspath(root))
        self.rules = _Rules(options)
        self.root_is_dir = os.path.isdir(self.root)
        self.confined = _confinement(self.root, options)
        # folder (absolute) -> (levels, identities of the folders leading to it), None = skipped
        self._folders: dict[str, tuple[tuple[_Level, ...], frozenset[tuple[int, int]]] | None] = {}

    def relative_parts(self, path: str | os.PathLike[str]) -> list[str] | None:
        """Path components of ``path`` below the root, or None when it is not below it."""
        try:
            rel = os.path.relpath(os.path.abspath(os.fspath(path)), self.root)
        except ValueError:  # another drive on Windows
            return None
        parts = rel.split(os.sep)
        if rel == os.curdir or parts[0] == os.pardir:
            return None
        return parts

    def surely_excluded(self, path: str | os.PathLike[str]) -> bool:
        """True when a folder on the way to ``path`` is pruned by name alone.

        Looks at the hidden rule and the exclude patterns only, never at the disk or at
        .gitignore files, so it is cheap and also works for paths that no longer exist: the
        watcher uses it to drop events from excluded folders before they count as activity.
        False means "maybe": ``included`` has the final word.
        """
        if not self.root_is_dir:
            return os.path.abspath(os.fspath(path)) != self.root
        parts = self.relative_parts(path)
        if parts is None:
            return True
        return any(
            self.rules.skips(name, "/".join(parts[: i + 1]), True, ())
            for i, name in enumerate(parts[:-1])
        )

    def folder(
        self, parts: list[str]
    ) -> tuple[tuple[_Level, ...], frozenset[tuple[int, int]]] | None:
        """(ignore levels, folder identities on the way) for a folder below the root, or None.

        None when walk would never enter that folder (excluded, hidden, a virtualenv, a
        symlink loop, unreadable or not a folder at all).
        """
        key = os.path.join(self.root, *parts)
        if key in self._folders:
            return self._folders[key]
        if not parts:
            ident = _identity(self.root)
            result = (self.rules.root_levels(self.root), frozenset([ident] if ident else []))
            self._folders[key] = result
            return result
        parent = self.folder(parts[:-1])
        result = None if parent is None else self._enter(key, parts, *parent)
        self._folders[key] = result
        return result

    def _enter(
        self,
        dir_abs: str,
        parts: list[str],
        levels: tuple[_Level, ...],
        idents: frozenset[tuple[int, int]],
    ) -> tuple[tuple[_Level, ...], frozenset[tuple[int, int]]] | None:
        """The folder step of ``folder``: mirror exactly what walk checks before descending."""
        options = self.rules.options
        if os.path.islink(dir_abs) and not self._may_follow(dir_abs):
            return None
        if not os.path.isdir(dir_abs):
            return None
        rel = "/".join(parts)
        if self.rules.skips(parts[-1], rel, True, levels):
            return None
        ident = _identity(dir_abs)
        if ident is not None:
            if ident in idents:
                return None
            idents = idents | {ident}
        if options.use_default_excludes and any(
            os.path.isfile(os.path.join(dir_abs, marker)) for marker in _FOLDER_MARKERS
        ):
            return None
        if not os.access(dir_abs, os.R_OK | os.X_OK):
            return None
        return self.rules.child_levels(dir_abs, rel + "/", levels), idents

    def _may_follow(self, link: str) -> bool:
        """Whether walk follows this symlink (see ``WalkOptions.follow_symlinks``)."""
        if not self.rules.options.follow_symlinks:
            return False
        return self.confined is None or not _leaves(link, self.confined)

    def included(self, path: str | os.PathLike[str]) -> bool:
        """Would walk(root) yield ``path``? (See ``is_included``.)"""
        path_abs = os.path.abspath(os.fspath(path))
        if not self.root_is_dir:
            return path_abs == self.root and os.path.isfile(path_abs)
        parts = self.relative_parts(path_abs)
        if parts is None:
            return False
        found = self.folder(parts[:-1])
        if found is None:
            return False
        if os.path.islink(path_abs) and not self._may_follow(path_abs):
            return False
        try:
            st = os.stat(path_abs)
        except OSError:
            return False
        if not stat.S_ISREG(st.st_mode):
            return False
        return not self.rules.skips(parts[-1], "/".join(parts), False, found[0])

    def walk_below(self, directory: str | os.PathLike[str]) -> Iterator[FoundFile]:
        """What walk(root) would yield inside ``directory`` (a folder below the root).

        Files elsewhere in the tree are not walked, so the one-visit rule for duplicate links
        only holds within ``directory``.
        """
        if not self.root_is_dir:
            return
        parts = self.relative_parts(directory)
        if parts is None:
            if os.path.abspath(os.fspath(directory)) != self.root:
                return
            parts = []
        found = self.folder(parts)
        if found is None:
            return
        levels, idents = found
        dir_abs = os.path.join(self.root, *parts)
        entries = _scan(dir_abs, self.rules.options, at_root=not parts, strict=False)
        prefix = "/".join(parts) + "/" if parts else ""
        yield from _walk_from(
            dir_abs, prefix, levels, entries, self.rules, set(idents), confined=self.confined
        )
