"""Where the knowledge base lives, and the settings a project file gives it.

The data folder is the first of:

1. ``--data-dir PATH`` on the command line;
2. the environment variable ``KNOWLEDGE_AGENT_HOME``;
3. the nearest ``.knowledge-agent.toml`` from the working folder upward — a project-local
   knowledge base: its ``data_dir`` (relative to the file), by default the
   ``.knowledge-agent/`` folder beside it;
4. the user data folder, ``platformdirs.user_data_dir("knowledge-agent")``.

The nearest project file supplies the other settings (chunk sizes, search fusion, doc type
rules, scan paths, default knowledge base) whichever rule chose the data folder. A file
with an unknown key or a bad value is a :class:`~knowledge_agent.errors.ConfigError`
whose one-line message names the file and the key. ``knowledge-agent init`` writes a file
with every setting at its default (:func:`default_config_text`).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import platformdirs

from knowledge_agent.chunking import ChunkConfig
from knowledge_agent.errors import ConfigError
from knowledge_agent.ingest.doc_types import DEFAULT_DOC_TYPE_RULES
from knowledge_agent.search.config import SearchConfig

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

__all__ = [
    "CONFIG_FILE_NAME",
    "ENV_HOME",
    "LOCAL_DATA_DIR",
    "ProjectConfig",
    "ScanPath",
    "Settings",
    "default_config_text",
    "find_config",
    "load_config",
    "resolve_settings",
    "write_default_config",
]

CONFIG_FILE_NAME = ".knowledge-agent.toml"
ENV_HOME = "KNOWLEDGE_AGENT_HOME"
LOCAL_DATA_DIR = ".knowledge-agent"
APP_NAME = "knowledge-agent"

# The [search] keys a project file may set: the ranking knobs users tune.
SEARCH_KEYS = (
    "fusion",
    "keyword_weight",
    "semantic_weight",
    "rrf_k",
    "coverage_weight",
    "proximity_weight",
    "document_weight",
    "expansion_terms",
    "known_item_share",
    "recency_weight",
    "recency_days",
    "decay_half_life",
    "mmr_lambda",
    "rerank_depth",
    "rerank_weight",
    "doc_type_weights",
)
CHUNK_KEYS = tuple(f.name for f in fields(ChunkConfig))
SCAN_KEYS = ("path", "kb", "include", "exclude")


@dataclass(frozen=True)
class ScanPath:
    """A folder or file that ``sync`` collects: where, into which kb, with which globs."""

    path: Path
    kb: str = "default"
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()


@dataclass(frozen=True)
class ProjectConfig:
    """What a ``.knowledge-agent.toml`` says; the defaults when there is none.

    ``data_dir`` is None unless the file names one (already made absolute).
    ``doc_type_rules`` maps a folder name (lower case) to a doc type and replaces the
    built-in rules.
    """

    data_dir: Path | None = None
    default_kb: str = "default"
    scan: tuple[ScanPath, ...] = ()
    chunk_config: ChunkConfig = field(default_factory=ChunkConfig)
    search_config: SearchConfig = field(default_factory=SearchConfig)
    doc_type_rules: Mapping[str, str] = field(default_factory=lambda: dict(DEFAULT_DOC_TYPE_RULES))
    embeddings: Mapping[str, Any] | None = field(default=None, hash=False)
    """The ``[embeddings]`` table (``provider = "wordllama"`` …), checked when a core opens."""
    rerank: Mapping[str, Any] | None = field(default=None, hash=False)
    """The ``[rerank]`` table (``provider = "openai"`` …), checked when a core opens."""


@dataclass(frozen=True)
class Settings:
    """The resolved data folder, why it was chosen, and the project settings.

    ``origin`` is one of ``"option"``, ``"environment"``, ``"project file"`` or
    ``"user data folder"``; ``config_file`` is the project file read, if any.
    """

    data_dir: Path
    origin: str
    config_file: Path | None = None
    config: ProjectConfig = field(default_factory=ProjectConfig)


# -- finding and resolving ---------------------------------------------------------------


def find_config(start: str | os.PathLike[str]) -> Path | None:
    """The nearest ``.knowledge-agent.toml`` in ``start`` or a folder above it."""
    folder = Path(os.path.abspath(start))
    for candidate in (folder, *folder.parents):
        path = candidate / CONFIG_FILE_NAME
        if path.is_file():
            return path
    return None


def resolve_settings(
    data_dir: str | os.PathLike[str] | None = None,
    *,
    cwd: str | os.PathLike[str] | None = None,
    environ: Mapping[str, str] | None = None,
) -> Settings:
    """The data folder by the rules in the module docstring, with the project settings."""
    here = Path(os.path.abspath(cwd if cwd is not None else os.getcwd()))
    env = os.environ if environ is None else environ
    config_file = find_config(here)
    config = load_config(config_file) if config_file is not None else ProjectConfig()

    def absolute(path: str | os.PathLike[str]) -> Path:
        return Path(os.path.abspath(here / os.path.expanduser(os.fspath(path))))

    if data_dir is not None and os.fspath(data_dir) != "":
        return Settings(absolute(data_dir), "option", config_file, config)
    home = env.get(ENV_HOME, "")
    if home:
        return Settings(absolute(home), "environment", config_file, config)
    if config_file is not None:
        local = config.data_dir or config_file.parent / LOCAL_DATA_DIR
        return Settings(local, "project file", config_file, config)
    user = platformdirs.user_data_dir(APP_NAME, appauthor=False)
    return Settings(Path(user), "user data folder", None, config)


# -- reading a project file --------------------------------------------------------------


def load_config(path: str | os.PathLike[str]) -> ProjectConfig:
    """Read and check a project file; ``ConfigError`` naming the file and the key."""
    path = Path(os.path.abspath(path))
    try:
        with path.open("rb") as handle:
            data = tomllib.load(handle)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from exc
    try:
        return _project_config(data, path.parent)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from exc


def _project_config(data: dict[str, Any], base: Path) -> ProjectConfig:
    """The config from parsed TOML; paths are made absolute against ``base``."""
    known = (
        "data_dir",
        "default_kb",
        "scan",
        "chunking",
        "search",
        "doc_types",
        "embeddings",
        "rerank",
    )
    _no_unknown_keys(data, known, "")
    data_dir = _string(data, "data_dir", "")
    return ProjectConfig(
        data_dir=_absolute(base, data_dir) if data_dir is not None else None,
        default_kb=_string(data, "default_kb", "") or "default",
        scan=tuple(_scan_paths(data.get("scan", []), base)),
        chunk_config=_section(data, "chunking", CHUNK_KEYS, ChunkConfig),
        search_config=_section(data, "search", SEARCH_KEYS, SearchConfig),
        doc_type_rules=_doc_types(data.get("doc_types")),
        embeddings=_provider(data, "embeddings"),
        rerank=_provider(data, "rerank"),
    )


def _provider(data: Mapping[str, Any], name: str) -> dict[str, Any] | None:
    """An ``[embeddings]`` or ``[rerank]`` table: it must name its provider."""
    if name not in data:
        return None
    table = _table(data, name)
    if not isinstance(table.get("provider"), str):
        raise ConfigError(f'{name}.provider is required, e.g. provider = "wordllama"')
    return dict(table)


def _absolute(base: Path, path: str) -> Path:
    return Path(os.path.abspath(base / os.path.expanduser(path)))


def _no_unknown_keys(table: Mapping[str, Any], known: tuple[str, ...], prefix: str) -> None:
    for key in table:
        if key not in known:
            raise ConfigError(f"unknown key {prefix}{key!s} (known: {', '.join(known)})")


def _string(table: Mapping[str, Any], key: str, prefix: str) -> str | None:
    value = table.get(key)
    if value is not None and not isinstance(value, str):
        raise ConfigError(f"{prefix}{key} must be a string, got {value!r}")
    return value


def _strings(table: Mapping[str, Any], key: str, prefix: str) -> tuple[str, ...]:
    value = table.get(key, [])
    if not isinstance(value, list) or not all(isinstance(entry, str) for entry in value):
        raise ConfigError(f"{prefix}{key} must be a list of strings, got {value!r}")
    return tuple(value)


def _table(data: Mapping[str, Any], name: str) -> dict[str, Any]:
    value = data.get(name, {})
    if not isinstance(value, dict):
        raise ConfigError(f"{name} must be a table ([{name}]), got {value!r}")
    return value


def _section(data: Mapping[str, Any], name: str, keys: tuple[str, ...], kind: Any) -> Any:
    """A config object from a table whose keys must be among ``keys``."""
    table = _table(data, name)
    _no_unknown_keys(table, keys, f"{name}.")
    try:
        return kind(**table)
    except ConfigError as exc:
        raise ConfigError(f"{name}.{exc}") from exc


def _scan_paths(value: object, base: Path) -> list[ScanPath]:
    if not isinstance(value, list):
        raise ConfigError(f"scan must be an array of tables ([[scan]]), got {value!r}")
    found = []
    for number, entry in enumerate(value, start=1):
        prefix = f"scan[{number}]."
        if not isinstance(entry, dict):
            raise ConfigError(f"scan[{number}] must be a table ([[scan]]), got {entry!r}")
        _no_unknown_keys(entry, SCAN_KEYS, prefix)
        path = _string(entry, "path", prefix)
        if not path:
            raise ConfigError(f"{prefix}path is required")
        found.append(
            ScanPath(
                path=_absolute(base, path),
                kb=_string(entry, "kb", prefix) or "default",
                include=_strings(entry, "include", prefix),
                exclude=_strings(entry, "exclude", prefix),
            )
        )
    return found


def _doc_types(value: object) -> dict[str, str]:
    if value is None:
        return dict(DEFAULT_DOC_TYPE_RULES)
    if not isinstance(value, dict):
        raise ConfigError(f"doc_types must be a table ([doc_types]), got {value!r}")
    rules = {}
    for folder, doc_type in value.items():
        if not isinstance(doc_type, str) or not doc_type:
            raise ConfigError(f"doc_types.{folder} must be a non-empty string, got {doc_type!r}")
        rules[folder.lower()] = doc_type
    return rules


# -- writing the default file ------------------------------------------------------------

# (key, one-line comment) in the order the file lists them; defaults come from the classes.
_CHUNK_COMMENTS = {
    "min_chunk_size": "a document shorter than twice this many characters is one chunk",
    "max_chunk_size": "no chunk is longer than this many characters",
    "overlap_ratio": "share of max_chunk_size that neighbouring window pieces overlap",
}
_SEARCH_COMMENTS = {
    "fusion": 'how keyword and semantic rankings combine: "rrf" or "weighted"',
    "keyword_weight": "weight of the keyword (BM25F) ranking",
    "semantic_weight": "weight of the semantic (TF-IDF) ranking",
    "rrf_k": "reciprocal rank fusion constant: higher flattens the rank differences",
    "coverage_weight": "bonus for the share of the query one line or sentence of a chunk holds",
    "proximity_weight": "bonus for the query's words standing together in that line",
    "document_weight": "bonus for how well the chunk's whole document matches",
    "expansion_terms": "words of the first hits added to long, unclear queries (0: off)",
    "known_item_share": "a query nearly matched whole by one chunk is ranked by keywords alone",
    "recency_weight": "boost of recently changed files: 1 + weight * exp(-age / recency_days)",
    "recency_days": "how fast the recency boost fades, in days",
    "decay_half_life": "temporal decay: scores halve every this many days of age (0: off)",
    "mmr_lambda": "push near-duplicate results down: 1 keeps the order, 0.7 is typical (0: off)",
    "rerank_depth": "results a reranker re-scores, when one is set and a search asks for it",
    "rerank_weight": "how much the reranker's scores can move a result",
}


def _toml_value(value: object) -> str:
    """A TOML literal for a string, number, bool or list of strings (JSON spells them alike)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return json.dumps(value, ensure_ascii=False)


def default_config_text() -> str:
    """The commented project file ``init`` writes: every setting at its default."""
    defaults = ProjectConfig()
    chunk, search = defaults.chunk_config, defaults.search_config
    lines = [
        "# knowledge-agent project settings. Commands run in this folder or below use them;",
        "# the knowledge base itself lives in data_dir. Every value shown is the default.",
        "",
        "# Folder holding the database and the indexes, relative to this file.",
        f"data_dir = {_toml_value(LOCAL_DATA_DIR)}",
        "# Knowledge base that `add` and `watch` write to when --kb is not given.",
        f"default_kb = {_toml_value(defaults.default_kb)}",
        "",
        "# How documents are cut into chunks (sizes in characters).",
        "[chunking]",
    ]
    for key, comment in _CHUNK_COMMENTS.items():
        lines.append(f"{key} = {_toml_value(getattr(chunk, key))}  # {comment}")
    lines += ["", "# How search ranks chunks.", "[search]"]
    for key, comment in _SEARCH_COMMENTS.items():
        lines.append(f"{key} = {_toml_value(getattr(search, key))}  # {comment}")
    lines += [
        "",
        "# Score multiplier per doc type (the document boost). This table replaces the",
        "# built-in one; an empty table turns it off.",
        "[search.doc_type_weights]",
        *(f"{name} = {_toml_value(weight)}" for name, weight in search.doc_type_weights.items()),
    ]
    lines += [
        "",
        "# Folder name -> doc type (search --doc-type). This table replaces the built-in one.",
        "[doc_types]",
    ]
    for folder, doc_type in defaults.doc_type_rules.items():
        lines.append(f"{folder} = {_toml_value(doc_type)}")
    lines += [
        "",
        "# Dense embeddings: a third ranking fused with the other two (off by default).",
        '# "wordllama" runs offline (pip install "knowledge-agent[embed]"); "openai" calls an',
        "# OpenAI-compatible /v1/embeddings server. Changing it re-embeds everything.",
        "# [embeddings]",
        '# provider = "wordllama"',
        "",
        "# A reranker for search(rerank=True) and knowledge_semantic_search (none by default).",
        "# [rerank]",
        '# provider = "openai"',
        '# base_url = "http://127.0.0.1:8080/v1"',
        '# model = "bge-reranker-v2-m3"',
        '# api_key_env = "RERANK_API_KEY"',
        "",
        "# Folders `sync` collects (none by default). Paths are relative to this file;",
        "# include / exclude are gitignore-style globs. Repeat the block for more folders.",
        "# [[scan]]",
        '# path = "docs"',
        '# kb = "default"',
        '# include = ["*.md", "*.pdf"]',
        '# exclude = ["drafts/"]',
        "",
    ]
    return "\n".join(lines)


def write_default_config(folder: str | os.PathLike[str], *, force: bool = False) -> Path:
    """Write :func:`default_config_text` to ``folder/.knowledge-agent.toml``.

    ``ConfigError`` if the file exists and ``force`` is false.
    """
    path = Path(os.path.abspath(folder)) / CONFIG_FILE_NAME
    if path.exists() and not force:
        raise ConfigError(f"{path} already exists (use --force to overwrite it)")
    try:
        path.write_text(default_config_text(), encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot write: {exc.strerror or exc}") from exc
    return path
