"""Tests for knowledge_agent.ingest.walker: which files a folder ingest sees."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from files import write
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from knowledge_agent.errors import ConfigError, IngestError
from knowledge_agent.ingest.walker import (
    DEFAULT_EXCLUDES,
    LINK_OUTSIDE,
    NON_TEXT_EXCLUDES,
    NON_TEXT_KINDS,
    FoundFile,
    WalkOptions,
    is_included,
    walk,
)


def make_tree(root: Path, files: dict[str, str | bytes]) -> None:
    """Create ``files`` ({posix relative path: content}) under ``root``."""
    for rel, content in files.items():
        write(root.joinpath(*rel.split("/")), content)


def rels(root: Path, options: WalkOptions | None = None) -> list[str]:
    return [found.relative for found in walk(root, options)]


def can_symlink(tmp_path: Path) -> bool:
    try:
        os.symlink(tmp_path, tmp_path / "probe-link", target_is_directory=True)
    except (OSError, NotImplementedError):
        return False
    os.unlink(tmp_path / "probe-link")
    return True


# -- defaults -------------------------------------------------------------------------------


def test_defaults_skip_junk_hidden_and_virtualenvs(tmp_path: Path) -> None:
    make_tree(
        tmp_path,
        {
            "README.md": "hi",
            "src/app.py": "x = 1",
            "src/__pycache__/app.cpython-311.pyc": b"\0",
            "src/app.pyc": b"\0",
            ".git/HEAD": "ref",
            ".git/info/exclude": "",
            "node_modules/left-pad/index.js": "x",
            "web/vendor.min.js": "x",
            "web/site.css.map": "{}",
            "web/site.js": "x",
            ".hidden.md": "secret",
            ".config/settings.toml": "a = 1",
            "env/pyvenv.cfg": "home = /usr",
            "env/lib/module.py": "x",
            "pkg.egg-info/PKG-INFO": "x",
            "build/out.txt": "x",
            "dist/pkg.tar.gz": b"\0",
            "notes.txt~": "backup",
        },
    )
    assert rels(tmp_path) == ["README.md", "src/app.py", "web/site.js"]


def test_default_excludes_are_gitignore_patterns() -> None:
    assert ".git/" in DEFAULT_EXCLUDES
    assert "node_modules/" in DEFAULT_EXCLUDES
    assert "*.pyc" in DEFAULT_EXCLUDES
    assert all(isinstance(pattern, str) for pattern in DEFAULT_EXCLUDES)
    # Minified bundles and source maps are left out as not text, so an include brings them in.
    assert not {"*.min.js", "*.min.css", "*.map"} & set(DEFAULT_EXCLUDES)
    assert {"*.min.js", "*.min.css", "*.map"} <= set(NON_TEXT_EXCLUDES)
    assert tuple(p for ps in NON_TEXT_KINDS.values() for p in ps) == NON_TEXT_EXCLUDES


def test_what_is_not_text_is_skipped_unless_an_include_names_it(tmp_path: Path) -> None:
    files = {
        "docs/guide.md": "x",
        "docs/img/diagram.svg": "<svg/>",
        "docs/img/logo.png": b"\x89PNG",
        "assets/font.woff2": b"\0",
        "release.tar.gz": b"\0",
        "package-lock.json": "{}",
        "package.json": "{}",
    }
    make_tree(tmp_path, files)
    assert rels(tmp_path) == ["docs/guide.md", "package.json"]
    assert is_included(tmp_path, tmp_path / "docs/guide.md", WalkOptions())
    assert not is_included(tmp_path, tmp_path / "docs/img/diagram.svg", WalkOptions())
    svg = WalkOptions(include=("*.svg", "*.md"))
    assert rels(tmp_path, svg) == ["docs/guide.md", "docs/img/diagram.svg"]
    everything = sorted(files)
    assert rels(tmp_path, WalkOptions(use_default_excludes=False)) == everything


def test_minified_bundles_and_source_maps_come_back_with_an_include(tmp_path: Path) -> None:
    make_tree(
        tmp_path,
        {
            "web/app.js": "x",
            "web/vendor.min.js": "x",
            "web/site.min.css": "x",
            "web/app.js.map": "{}",
        },
    )
    assert rels(tmp_path) == ["web/app.js"]
    assert rels(tmp_path, WalkOptions(include=("*.min.js", "*.map"))) == [
        "web/app.js.map",
        "web/vendor.min.js",
    ]


def test_files_left_out_as_not_text_are_reported_with_their_kind(tmp_path: Path) -> None:
    make_tree(
        tmp_path,
        {
            "docs/guide.md": "x",
            "docs/img/logo.png": b"\x89PNG",
            "docs/img/diagram.svg": "<svg/>",
            "fonts/a.woff2": b"\0",
            "clip.mp4": b"\0",
            "release.tar.gz": b"\0",
            "yarn.lock": "x",
            "web/app.js.map": "{}",
            "web/vendor.min.js": "x",
            "node_modules/x/icon.png": b"\0",  # in a pruned folder: never seen
            "ignored/photo.jpg": b"\0",  # .gitignored: left out for that reason
            ".gitignore": "ignored/\n",
        },
    )
    seen: list[tuple[str, str]] = []
    found = [f.relative for f in walk(tmp_path, on_excluded=lambda *pair: seen.append(pair))]
    assert found == ["docs/guide.md"]
    assert seen == [
        ("clip.mp4", "media"),
        ("docs/img/diagram.svg", "image"),
        ("docs/img/logo.png", "image"),
        ("fonts/a.woff2", "font"),
        ("release.tar.gz", "archive"),
        ("web/app.js.map", "source map"),
        ("web/vendor.min.js", "minified"),
        ("yarn.lock", "lock file"),
    ]
    # With include patterns, what they do not name is out of scope, not "not text".
    seen.clear()
    svg = WalkOptions(include=("*.md", "*.svg"))
    found = [f.relative for f in walk(tmp_path, svg, on_excluded=lambda *p: seen.append(p))]
    assert found == ["docs/guide.md", "docs/img/diagram.svg"] and seen == []
    seen.clear()
    off = WalkOptions(use_default_excludes=False)
    list(walk(tmp_path, off, on_excluded=lambda *pair: seen.append(pair)))
    assert seen == []


def test_defaults_can_be_turned_off(tmp_path: Path) -> None:
    make_tree(tmp_path, {"node_modules/a.js": "x", "env/pyvenv.cfg": "", "a.md": "x"})
    options = WalkOptions(use_default_excludes=False)
    assert rels(tmp_path, options) == ["a.md", "env/pyvenv.cfg", "node_modules/a.js"]


def test_include_hidden(tmp_path: Path) -> None:
    make_tree(tmp_path, {".notes/a.md": "x", ".env": "x", ".gitignore": "*.log\n", "b.md": "x"})
    assert rels(tmp_path) == ["b.md"]
    # .gitignore is a rule file: never yielded, even with include_hidden
    assert rels(tmp_path, WalkOptions(include_hidden=True)) == [".env", ".notes/a.md", "b.md"]


def test_the_root_itself_is_never_excluded(tmp_path: Path) -> None:
    root = tmp_path / "build"
    make_tree(root, {"pyvenv.cfg": "home = /usr", "doc.md": "x", "node_modules/x.js": "x"})
    assert rels(root) == ["doc.md", "pyvenv.cfg"]


def test_order_is_sorted_by_relative_path(tmp_path: Path) -> None:
    make_tree(tmp_path, {"a.txt": "x", "a/b.txt": "x", "a-b/c.txt": "x", "B.md": "x", "z": "x"})
    result = rels(tmp_path)
    assert result == sorted(result)
    assert set(result) == {"a.txt", "a/b.txt", "a-b/c.txt", "B.md", "z"}


def test_found_file_fields(tmp_path: Path) -> None:
    make_tree(tmp_path, {"docs/guide.md": "hello"})
    [found] = walk(tmp_path)
    assert isinstance(found, FoundFile)
    assert found.path == tmp_path / "docs" / "guide.md"
    assert found.path.is_absolute()
    assert found.relative == "docs/guide.md"
    assert found.size == 5
    assert found.mtime_ns == (tmp_path / "docs" / "guide.md").stat().st_mtime_ns
    assert found.too_large is False


def test_relative_root_gives_absolute_paths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_tree(tmp_path, {"kb/a.md": "x"})
    monkeypatch.chdir(tmp_path)
    [found] = walk("kb")
    assert found.path == tmp_path / "kb" / "a.md"
    assert found.relative == "a.md"


# -- include / exclude ----------------------------------------------------------------------


def test_include_globs(tmp_path: Path) -> None:
    make_tree(
        tmp_path,
        {"a.md": "x", "b.txt": "x", "sub/c.md": "x", "docs/d.txt": "x", "docs/e/f.py": "x"},
    )
    assert rels(tmp_path, WalkOptions(include=("*.md",))) == ["a.md", "sub/c.md"]
    assert rels(tmp_path, WalkOptions(include=["*.md", "docs/**"])) == [
        "a.md",
        "docs/d.txt",
        "docs/e/f.py",
        "sub/c.md",
    ]
    assert rels(tmp_path, WalkOptions(include=("*.md", "!sub/*"))) == ["a.md"]


def test_exclude_globs(tmp_path: Path) -> None:
    make_tree(
        tmp_path,
        {"a.md": "x", "draft.md": "x", "private/p.md": "x", "sub/private/q.md": "x", "x.log": ""},
    )
    options = WalkOptions(exclude=("draft.md", "/private/", "*.log"))
    assert rels(tmp_path, options) == ["a.md", "sub/private/q.md"]
    # directory pattern without anchor matches at any depth
    assert rels(tmp_path, WalkOptions(exclude=("private/",))) == ["a.md", "draft.md", "x.log"]


def test_exclude_negation_reincludes_a_default(tmp_path: Path) -> None:
    make_tree(tmp_path, {"build/notes.md": "x", "dist/x.js": "x"})
    assert rels(tmp_path, WalkOptions(exclude=("!build/",))) == ["build/notes.md"]


def test_excluded_folders_are_pruned(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    make_tree(tmp_path, {"keep/a.md": "x", "node_modules/deep/b.js": "x"})
    scanned: list[str] = []
    real_scandir = os.scandir

    def spy(path: str) -> object:
        scanned.append(os.fspath(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", spy)
    assert rels(tmp_path) == ["keep/a.md"]
    assert not any("node_modules" in path for path in scanned)


# -- .gitignore -----------------------------------------------------------------------------


def test_nested_gitignore_with_negation(tmp_path: Path) -> None:
    make_tree(
        tmp_path,
        {
            ".gitignore": "*.log\nsecret/\n",
            "app.log": "x",
            "a.md": "x",
            "secret/s.md": "x",
            "sub/.gitignore": "!keep.log\n*.tmp\n",
            "sub/keep.log": "x",
            "sub/other.log": "x",
            "sub/t.tmp": "x",
            "sub/deeper/keep.log": "x",
            "sub/deeper/x.tmp": "x",
            "other/t.tmp": "x",
        },
    )
    assert rels(tmp_path) == ["a.md", "other/t.tmp", "sub/deeper/keep.log", "sub/keep.log"]
    assert rels(tmp_path, WalkOptions(respect_gitignore=False)) == [
        "a.md",
        "app.log",
        "other/t.tmp",
        "secret/s.md",
        "sub/deeper/keep.log",
        "sub/deeper/x.tmp",
        "sub/keep.log",
        "sub/other.log",
        "sub/t.tmp",
    ]


def test_nested_gitignore_patterns_are_relative_to_their_folder(tmp_path: Path) -> None:
    make_tree(
        tmp_path,
        {
            "sub/.gitignore": "/top.md\nnested/*.md\n",
            "sub/top.md": "x",
            "sub/x/top.md": "x",
            "sub/nested/n.md": "x",
            "top.md": "x",
        },
    )
    assert rels(tmp_path) == ["sub/x/top.md", "top.md"]


def test_gitignore_directory_patterns(tmp_path: Path) -> None:
    make_tree(
        tmp_path,
        {
            ".gitignore": "cache/\n/out\ndocs/**/*.tmp\n",
            "cache/a.md": "x",
            "src/cache/b.md": "x",
            "cache.md": "x",
            "out/c.md": "x",
            "src/out/d.md": "x",
            "docs/a/b/e.tmp": "x",
            "docs/f.md": "x",
            # "cache/" matches folders only, never a file named cache
            "files/cache": "x",
        },
    )
    assert rels(tmp_path) == ["cache.md", "docs/f.md", "files/cache", "src/out/d.md"]


SLOW = "*a" * 10 + "b"  # [^/]*a[^/]*a… backtracks for minutes on a 40-character name


def test_a_gitignore_line_too_slow_to_match_is_dropped_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    make_tree(
        tmp_path,
        {
            ".gitignore": f"{SLOW}\n*.log\n",
            "a" * 40 + "c.md": "x",
            "aab.md": "x",  # what the dropped line would have matched
            "x.log": "x",
        },
    )
    with caplog.at_level("WARNING"):
        assert rels(tmp_path) == ["a" * 40 + "c.md", "aab.md"]
    [warning] = [r.getMessage() for r in caplog.records if "ignoring pattern" in r.getMessage()]
    assert ".gitignore" in warning and "wildcards in one path segment" in warning


@pytest.mark.parametrize("name", ["include", "exclude"])
def test_an_include_or_exclude_too_slow_to_match_is_refused(name: str) -> None:
    with pytest.raises(ConfigError, match=f"{name} pattern .* is refused: it has 10 wildcards"):
        WalkOptions(**{name: ("*.md", SLOW)})
    assert WalkOptions(**{name: ("*.min.*", "**/build/**/*.js")})  # two a segment: bounded


def test_negation_cannot_reinclude_inside_an_excluded_folder(tmp_path: Path) -> None:
    make_tree(tmp_path, {".gitignore": "logs/\n!logs/keep.md\n", "logs/keep.md": "x"})
    assert rels(tmp_path) == []


def test_git_info_exclude(tmp_path: Path) -> None:
    make_tree(
        tmp_path,
        {".git/info/exclude": "*.bak\nlocal.md\n", ".gitignore": "!local.md\n", "a.bak": "x"},
    )
    make_tree(tmp_path, {"local.md": "x", "b.md": "x"})
    # .gitignore outranks info/exclude, as in git
    assert rels(tmp_path) == ["b.md", "local.md"]


# -- size, symlinks, single files, errors ---------------------------------------------------


def test_size_limit_flags_but_yields(tmp_path: Path) -> None:
    make_tree(tmp_path, {"big.txt": "x" * 101, "small.txt": "x" * 100})
    found = {f.relative: f for f in walk(tmp_path, WalkOptions(max_file_size=100))}
    assert found["big.txt"].too_large is True
    assert found["big.txt"].size == 101
    assert found["small.txt"].too_large is False


def test_symlink_loop_terminates_and_yields_each_file_once(tmp_path: Path) -> None:
    if not can_symlink(tmp_path):
        pytest.skip("symlinks not available")
    make_tree(tmp_path, {"a/file.md": "x", "top.md": "x"})
    os.symlink(tmp_path / "a", tmp_path / "a" / "loop", target_is_directory=True)
    os.symlink(tmp_path, tmp_path / "a" / "up", target_is_directory=True)
    assert rels(tmp_path) == ["a/file.md", "top.md"]
    assert not is_included(tmp_path, tmp_path / "a" / "loop" / "file.md", WalkOptions())
    assert not is_included(tmp_path, tmp_path / "a" / "up" / "top.md", WalkOptions())


def test_second_link_to_a_visited_folder_or_file_is_skipped(tmp_path: Path) -> None:
    if not can_symlink(tmp_path):
        pytest.skip("symlinks not available")
    make_tree(tmp_path, {"real/doc.md": "x", "note.md": "x"})
    os.symlink(tmp_path / "real", tmp_path / "zlink", target_is_directory=True)
    os.symlink(tmp_path / "note.md", tmp_path / "znote.md")
    assert rels(tmp_path) == ["note.md", "real/doc.md"]


def test_symlink_is_followed_once_and_keeps_its_path(tmp_path: Path) -> None:
    if not can_symlink(tmp_path):
        pytest.skip("symlinks not available")
    outside = tmp_path / "outside"
    make_tree(outside, {"shared.md": "x"})
    root = tmp_path / "root"
    root.mkdir()
    os.symlink(outside, root / "linked", target_is_directory=True)
    os.symlink(outside / "shared.md", root / "alias.md")
    every_link = WalkOptions(follow_outside_links=True)
    # the first in walk order wins; paths stay as reached under the root
    found = [(f.relative, f.path) for f in walk(root, every_link)]
    assert found == [("alias.md", root / "alias.md")]
    assert rels(root, WalkOptions(follow_symlinks=False, follow_outside_links=True)) == []
    os.unlink(root / "alias.md")
    assert [f.path for f in walk(root, every_link)] == [root / "linked" / "shared.md"]


def outside_links(root: Path, options: WalkOptions | None = None) -> tuple[list[str], list[str]]:
    """(relative paths walk yields, links it reported as leaving the root)."""
    left: list[str] = []

    def excluded(relative: str, kind: str) -> None:
        if kind == LINK_OUTSIDE:
            left.append(relative)

    return [found.relative for found in walk(root, options, on_excluded=excluded)], left


def test_links_leaving_the_root_are_reported_not_followed(tmp_path: Path) -> None:
    if not can_symlink(tmp_path):
        pytest.skip("symlinks not available")
    make_tree(tmp_path / "home", {".ssh/id_rsa": "PRIVATE KEY", "notes.md": "secret"})
    root = tmp_path / "repo"
    make_tree(root, {"docs/guide.md": "x", "README.md": "x"})
    os.symlink(tmp_path / "home" / ".ssh", root / "docs" / "keys", target_is_directory=True)
    os.symlink(tmp_path / "home" / "notes.md", root / "notes.md")
    os.symlink(Path("..") / "home", root / "up", target_is_directory=True)  # relative, via ..
    os.symlink(root / "docs", root / "zdocs", target_is_directory=True)  # stays inside
    os.symlink(Path("..") / "repo" / "README.md", root / "readme-again.md")  # out and back in

    yielded, left = outside_links(root)
    assert yielded == ["README.md", "docs/guide.md"]  # inside links: each real file once
    assert left == ["docs/keys", "notes.md", "up"]
    for path in ("docs/keys/id_rsa", "notes.md", "up/notes.md"):
        assert not is_included(root, root / path, WalkOptions())
        assert is_included(root, root / path, WalkOptions(follow_outside_links=True))
    assert is_included(root, root / "zdocs" / "guide.md", WalkOptions())

    everything, none_left = outside_links(root, WalkOptions(follow_outside_links=True))
    assert "docs/keys/id_rsa" in everything and "notes.md" in everything and not none_left
    # follow_symlinks=False (the MCP server's choice) stays the strictest: no link at all.
    strict, silent = outside_links(
        root, WalkOptions(follow_symlinks=False, follow_outside_links=True)
    )
    assert (strict, silent) == (["README.md", "docs/guide.md"], [])


def test_the_root_is_judged_by_its_real_path(tmp_path: Path) -> None:
    if not can_symlink(tmp_path):
        pytest.skip("symlinks not available")
    real = tmp_path / "real-root"
    make_tree(real, {"a/doc.md": "x"})
    make_tree(tmp_path / "elsewhere", {"other.md": "x"})
    os.symlink(real / "a", real / "b", target_is_directory=True)
    os.symlink(tmp_path / "elsewhere", real / "c", target_is_directory=True)
    named = tmp_path / "named-root"
    os.symlink(real, named, target_is_directory=True)  # the root itself is reached by a link
    assert outside_links(named) == (["a/doc.md"], ["c"])


def test_hidden_or_excluded_links_are_not_reported(tmp_path: Path) -> None:
    if not can_symlink(tmp_path):
        pytest.skip("symlinks not available")
    make_tree(tmp_path / "out", {"x.md": "x"})
    root = tmp_path / "root"
    make_tree(root, {"a.md": "x", ".gitignore": "ignored/\n"})
    os.symlink(tmp_path / "out", root / ".hidden", target_is_directory=True)
    os.symlink(tmp_path / "out", root / "ignored", target_is_directory=True)
    os.symlink(tmp_path / "out", root / "node_modules", target_is_directory=True)
    assert outside_links(root) == (["a.md"], [])


def test_stored_options_from_before_the_outside_rule_load_confined() -> None:
    # What a root stored before follow_outside_links existed holds (dataclasses.asdict).
    old = {
        "include": [],
        "exclude": ["drafts/"],
        "use_default_excludes": True,
        "respect_gitignore": True,
        "include_hidden": False,
        "max_file_size": 20 * 1024 * 1024,
        "follow_symlinks": True,
    }
    options = WalkOptions(**old)
    assert options.follow_symlinks and not options.follow_outside_links


LINK_TARGETS = ["in/a.md", "in", "in/deep", "..", "../out", "../out/b.md", "../out/sub", "."]


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(st.sampled_from(["", "in/", "in/deep/"]), st.sampled_from(LINK_TARGETS)),
        min_size=1,
        max_size=6,
    )
)
def test_no_yielded_file_lies_outside_the_root(links: list[tuple[str, str]]) -> None:
    """Whatever links a folder holds, walk yields only files whose real path is inside it,
    and is_included agrees."""
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        make_tree(base / "out", {"b.md": "x", "sub/c.md": "x"})
        root = base / "root"
        make_tree(root, {"in/a.md": "x", "in/deep/d.md": "x"})
        for number, (folder, target) in enumerate(links):
            link = root / folder / f"link{number}"
            try:
                os.symlink(root / target, link, target_is_directory=not target.endswith(".md"))
            except (OSError, NotImplementedError):
                pytest.skip("symlinks not available")
        real_root = os.path.realpath(root)
        found = list(walk(root))
        for file in found:
            real = os.path.realpath(file.path)
            assert real.startswith(real_root + os.sep), file.relative
            assert is_included(root, file.path, WalkOptions())
        assert {os.path.realpath(file.path) for file in found} == {
            os.path.realpath(root / "in" / "a.md"),
            os.path.realpath(root / "in" / "deep" / "d.md"),
        }


def test_dangling_symlink_is_skipped(tmp_path: Path) -> None:
    if not can_symlink(tmp_path):
        pytest.skip("symlinks not available")
    make_tree(tmp_path, {"a.md": "x"})
    os.symlink(tmp_path / "missing.md", tmp_path / "dangling.md")
    assert rels(tmp_path) == ["a.md"]


def test_single_file_root(tmp_path: Path) -> None:
    make_tree(tmp_path, {"node_modules/x.min.js": "abc", ".hidden": "x"})
    for rel in ("node_modules/x.min.js", ".hidden"):
        path = tmp_path / rel
        [found] = walk(path, WalkOptions(include=("*.md",), max_file_size=2))
        assert found.path == path
        assert found.relative == path.name
        assert found.too_large == (found.size > 2)
        assert is_included(path, path, WalkOptions(include=("*.md",)))
    assert not is_included(path, tmp_path / "other", WalkOptions())


def test_missing_root_raises_ingest_error(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    with pytest.raises(IngestError) as caught:
        walk(missing)  # raised at the call, not on first iteration
    assert caught.value.path == str(missing)
    assert "no such file" in caught.value.reason


@pytest.mark.skipif(not hasattr(os, "geteuid"), reason="POSIX permissions")
def test_unreadable_folder_is_logged_and_skipped(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    if os.geteuid() == 0:
        pytest.skip("root can read everything")
    make_tree(tmp_path, {"open/a.md": "x", "closed/b.md": "x"})
    (tmp_path / "closed").chmod(0)
    try:
        with caplog.at_level("WARNING", logger="knowledge_agent.ingest.walker"):
            assert rels(tmp_path) == ["open/a.md"]
        assert "closed" in caplog.text
        assert not is_included(tmp_path, tmp_path / "closed" / "b.md", WalkOptions())
    finally:
        (tmp_path / "closed").chmod(0o755)


# -- options validation ---------------------------------------------------------------------


def test_options_accept_lists() -> None:
    options = WalkOptions(include=["*.md"], exclude=["x/"])
    assert options.include == ("*.md",)
    assert options.exclude == ("x/",)
    assert hash(options)  # frozen and hashable once lists became tuples


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"max_file_size": -1}, "max_file_size"),
        ({"max_file_size": "big"}, "max_file_size"),
        ({"include": "*.md"}, "include"),
        ({"include": [1]}, "include"),
        ({"exclude": [None]}, "exclude"),
        ({"exclude": 3}, "exclude"),
        ({"respect_gitignore": "yes"}, "respect_gitignore"),
        ({"follow_symlinks": None}, "follow_symlinks"),
        ({"follow_outside_links": "yes"}, "follow_outside_links"),
    ],
)
def test_bad_options_raise_config_error_naming_the_field(kwargs: dict, field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        WalkOptions(**kwargs)


# -- is_included agrees with walk -----------------------------------------------------------


def test_is_included_examples(tmp_path: Path) -> None:
    make_tree(
        tmp_path,
        {
            ".gitignore": "*.log\n",
            "a.md": "x",
            "b.log": "x",
            "node_modules/c.js": "x",
            "env/pyvenv.cfg": "",
            "env/lib/d.py": "x",
            "sub/.gitignore": "*.md\n",
            "sub/e.md": "x",
        },
    )
    options = WalkOptions()
    assert is_included(tmp_path, tmp_path / "a.md", options)
    assert not is_included(tmp_path, tmp_path / "b.log", options)
    assert not is_included(tmp_path, tmp_path / "node_modules" / "c.js", options)
    assert not is_included(tmp_path, tmp_path / "env" / "lib" / "d.py", options)
    assert not is_included(tmp_path, tmp_path / "sub" / "e.md", options)
    assert not is_included(tmp_path, tmp_path / ".gitignore", options)
    assert not is_included(tmp_path, tmp_path / "missing.md", options)
    assert not is_included(tmp_path, tmp_path, options)  # folders are never yielded
    assert not is_included(tmp_path, tmp_path.parent / "elsewhere.md", options)


NAMES = [
    "a",
    "b",
    "c.md",
    "d.txt",
    ".h",
    "build",
    "node_modules",
    "x.log",
    "keep.log",
    "pyvenv.cfg",
]
PATTERNS = [
    "*.md",
    "*.log",
    "!keep.log",
    "c.md",
    "!c.md",
    "x.log",
    "d.txt",
    "!d.txt",
    "*",
    "!*/",
    "a",
    "a/",
    "!a/",
    "/b",
    "b/**",
    "**/c.md",
    "a/*.txt",
    "build/",
    "!build/",
    "!*.md",
]


@st.composite
def trees(draw: st.DrawFn) -> tuple[list[str], dict[str, list[str]], WalkOptions]:
    """A small random tree, .gitignore files somewhere in it, and random options."""
    paths = draw(
        st.lists(
            st.lists(st.sampled_from(NAMES), min_size=1, max_size=4).map("/".join),
            min_size=1,
            max_size=12,
        )
    )
    folders = sorted({p.rsplit("/", 1)[0] + "/" if "/" in p else "" for p in paths})
    patterns = st.lists(st.sampled_from(PATTERNS), max_size=3)
    ignores = {folder: draw(patterns) for folder in folders}
    mostly = st.sampled_from([True, True, False])  # the interesting rules on more often
    options = WalkOptions(
        include=tuple(
            draw(st.one_of(st.just([]), st.lists(st.sampled_from(PATTERNS), max_size=2)))
        ),
        exclude=tuple(draw(st.lists(st.sampled_from(PATTERNS), max_size=2))),
        use_default_excludes=draw(mostly),
        respect_gitignore=draw(mostly),
        include_hidden=draw(st.booleans()),
    )
    return paths, ignores, options


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trees())
def test_is_included_agrees_with_walk(
    case: tuple[list[str], dict[str, list[str]], WalkOptions],
) -> None:
    paths, ignores, options = case
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        files: list[Path] = []
        for rel in paths:
            target = root.joinpath(*rel.split("/"))
            # a name used both as a file and as a folder: the folder wins
            if any(p.startswith(rel + "/") for p in paths) or any(
                (root / a).is_file() for a in _prefixes(rel)
            ):
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text("x", encoding="utf-8")
            files.append(target)
        for folder, patterns in ignores.items():
            if (root / folder).is_dir():
                (root / folder / ".gitignore").write_text("\n".join(patterns), encoding="utf-8")
        walked = {found.path for found in walk(root, options)}
        for path in files:
            assert is_included(root, path, options) == (path in walked), path
        assert walked <= set(files)


def _prefixes(rel: str) -> list[str]:
    parts = rel.split("/")
    return ["/".join(parts[:i]) for i in range(1, len(parts))]
