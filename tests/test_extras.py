"""A feature whose optional extra is not installed fails with one message naming the extra and
the commands that install it, both where the package was installed and in a checkout.

Each test hides the extra's module (``sys.modules[name] = None`` makes ``import name`` fail and
``importlib.util.find_spec(name)`` return None) and triggers the feature where it imports it.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from knowledge_agent.analysis import AnalyzerConfig, TextAnalyzer
from knowledge_agent.cli import cli
from knowledge_agent.crawl import Crawler
from knowledge_agent.embeddings.minilm import MiniLMEmbedder
from knowledge_agent.embeddings.wordllama_provider import WordLlamaEmbedder, _import_wordllama
from knowledge_agent.errors import ConfigError
from knowledge_agent.extras import install_hint, missing_extra
from knowledge_agent.ingest.watcher import FolderWatcher

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def expected(feature: str, extra: str) -> str:
    return (
        f"{feature} needs the [{extra}] extra, which is not installed: "
        f'pip install "knowledge-agent[{extra}]" '
        f'(or, in a checkout of knowledge_agent: pip install ".[{extra}]")'
    )


def hide(monkeypatch: pytest.MonkeyPatch, *packages: str) -> None:
    """Make ``import package`` (and its submodules) fail, as when it is not installed."""
    for name in [m for m in sys.modules if m.split(".")[0] in packages]:
        monkeypatch.delitem(sys.modules, name)
    for package in packages:
        monkeypatch.setitem(sys.modules, package, None)


def forget_the_server(monkeypatch: pytest.MonkeyPatch) -> None:
    """Unload knowledge_agent.server, so that it imports the MCP SDK again."""
    for name in [m for m in sys.modules if m.startswith("knowledge_agent.server")]:
        monkeypatch.delitem(sys.modules, name)


def test_the_message_names_the_extra_and_both_install_commands() -> None:
    assert install_hint("web") == (
        'pip install "knowledge-agent[web]" (or, in a checkout of knowledge_agent: '
        'pip install ".[web]")'
    )
    assert missing_extra("crawling web pages", "web") == (
        "crawling web pages needs the [web] extra, which is not installed: "
        'pip install "knowledge-agent[web]" (or, in a checkout of knowledge_agent: '
        'pip install ".[web]")'
    )


def _raise_for_psycopg_storage() -> None:
    from knowledge_agent.backends.postgres.storage import PostgresStorage

    PostgresStorage("postgresql://127.0.0.1/kb")


def _raise_for_psycopg_indexes() -> None:
    from knowledge_agent.backends.postgres.indexes import load_psycopg

    load_psycopg()


CASES: list[tuple[str, str, str, Callable[[Path], object]]] = [
    # (hidden module, extra, the feature the message names, what imports it)
    ("httpx", "web", "crawling web pages", lambda tmp: Crawler("http://127.0.0.1:9/")),
    (
        "watchdog",
        "watch",
        "watching with watchdog",
        lambda tmp: FolderWatcher([tmp], lambda changes: None, backend="watchdog"),
    ),
    ("wordllama", "embed", "the WordLlama embedder (wordllama)", lambda tmp: WordLlamaEmbedder()),
    ("tokenizers", "minilm", "the MiniLM embedder (tokenizers)", lambda tmp: MiniLMEmbedder()),
    (
        "psycopg",
        "postgres",
        "the PostgreSQL backend (psycopg 3)",
        lambda tmp: _raise_for_psycopg_storage(),
    ),
    (
        "psycopg",
        "postgres",
        "the PostgreSQL backend (psycopg 3)",
        lambda tmp: _raise_for_psycopg_indexes(),
    ),
    (
        "jieba",
        "cjk",
        "AnalyzerConfig.cjk='jieba' (jieba)",
        lambda tmp: TextAnalyzer(AnalyzerConfig(cjk="jieba")),
    ),
]


@pytest.mark.parametrize(
    ("module", "extra", "feature", "use"),
    CASES,
    ids=[f"{extra}-{n}" for n, (_, extra, _, _) in enumerate(CASES)],
)
def test_a_missing_extra_is_a_config_error_naming_it(
    module: str,
    extra: str,
    feature: str,
    use: Callable[[Path], object],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    hide(monkeypatch, module)
    with pytest.raises(ConfigError) as info:
        use(tmp_path)
    assert str(info.value) == expected(feature, extra)


def test_a_wordllama_that_fails_to_import_names_the_extra_and_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    hide(monkeypatch, "wordllama")
    with pytest.raises(ConfigError) as info:
        _import_wordllama()
    prefix = expected("the WordLlama embedder (wordllama)", "embed")
    # The import's own error follows in brackets: a broken install says what broke.
    assert str(info.value).startswith(prefix + " (import of wordllama halted")


def test_the_server_package_without_mcp_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    hide(monkeypatch, "mcp")
    forget_the_server(monkeypatch)
    with pytest.raises(ImportError) as info:
        importlib.import_module("knowledge_agent.server")
    assert str(info.value) == expected("the MCP server", "mcp")


@pytest.mark.parametrize(
    ("module", "args", "feature", "extra"),
    [
        ("mcp", ["serve"], "the MCP server", "mcp"),
        ("httpx", ["add", "http://127.0.0.1:9/"], "crawling web pages", "web"),
    ],
)
def test_the_command_line_says_it_in_one_line(
    module: str,
    args: list[str],
    feature: str,
    extra: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("KNOWLEDGE_AGENT_HOME", raising=False)
    hide(monkeypatch, module)
    forget_the_server(monkeypatch)
    result = CliRunner().invoke(cli, ["--data-dir", str(tmp_path / "data"), *args])
    assert result.exit_code == 1, result.output
    assert result.stderr == f"Error: {expected(feature, extra)}\n"
    assert result.stdout == ""


def test_every_extra_a_message_names_is_declared() -> None:
    declared = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"][
        "optional-dependencies"
    ]
    named = {extra for _, extra, _, _ in CASES} | {"mcp"}
    assert named <= set(declared), named - set(declared)
