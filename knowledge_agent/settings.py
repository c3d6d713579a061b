"""Where the knowledge base lives, and whose settings apply to it.

The data folder is the first of:

1. ``--data-dir PATH`` on the command line;
2. the environment variable ``KNOWLEDGE_AGENT_HOME``;
3. the nearest ``.knowledge-agent.toml`` from the working folder upward — a project-local
   knowledge base: its ``data_dir`` (relative to the file), by default the
   ``.knowledge-agent/`` folder beside it;
4. the ``data_dir`` of the user config file, ``<user config folder>/config.toml``;
5. the user data folder, ``platformdirs.user_data_dir("knowledge-agent")``.

The backend is ``--backend URL``, else ``KNOWLEDGE_AGENT_BACKEND``, else the ``[backend] url``
of the settings file below, else the data folder: a ``postgresql://`` URL keeps the knowledge
base in that database instead (:mod:`knowledge_agent.backends`).

The other settings (chunk sizes, search fusion, doc type rules, scan paths, default
knowledge base, ``[embeddings]``, ``[rerank]`` and ``[backend]``) come from the project file
when it chose the data folder, else from the user config file (same format, paths relative
to it), else the defaults: a project file never configures a data folder chosen by ``--data-
dir`` or the environment. A file with an unknown key or a bad value is a
:class:`~knowledge_agent.errors.ConfigError` whose one-line message names the file and the
key. ``knowledge-agent init`` writes a file with every setting at its default
(:func:`default_config_text`).

A folder without a ``.knowledge-agent.toml`` may hold the settings files of the tools the
specs describe: 001's ``.agentos/kb_config.json`` and 002's ``config.toml`` (with its
``knowledge/<kb>/`` folders). The nearest folder holding any of the three is the project;
its ``.knowledge-agent.toml`` when it has one, else its other files, read together
(:mod:`knowledge_agent.project_files` maps their keys; where both set a setting,
``kb_config.json`` wins). The knowledge base lives in ``.knowledge-agent/`` in that folder.
Every setting's origin (file and key) is kept for ``knowledge-agent config --show``.

A project file may come with a cloned repository, so what it names that leaves its folder —
a database server (``[backend]``), a network provider under ``[embeddings]`` or ``[rerank]``
(its ``base_url``), an environment
variable to read (``api_key_env``), a path outside its folder (``data_dir``, a ``[[scan]]``
path, an embeddings ``cache_dir``; ``..`` and symlinks resolved) — applies only once the user
trusted the file with ``knowledge-agent trust`` (:mod:`knowledge_agent.trust`); an edited
file is untrusted again. Until then those settings are left out and
:attr:`Settings.warning` says so; everything else in the file applies. The user's own
settings (options, environment, the user config file) are always trusted.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import platformdirs

from knowledge_agent.backends import backend_label
from knowledge_agent.chunking import ChunkConfig
from knowledge_agent.errors import ConfigError
from knowledge_agent.ingest.doc_types import DEFAULT_DOC_TYPE_RULES
from knowledge_agent.project_files import agentos, knowledge_toml
from knowledge_agent.project_files.model import NotUsed, Origin, ScanPath, SpecFile
from knowledge_agent.project_files.values import inside as _inside
from knowledge_agent.search.config import SearchConfig
from knowledge_agent.trust import TrustRecord, TrustStore, content_digest, user_config_dir

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

__all__ = [
    "CONFIG_FILE_NAME",
    "ENDPOINT_KEYS",
    "ENV_BACKEND",
    "ENV_HOME",
    "ENV_READ_BACKEND",
    "LOCAL_DATA_DIR",
    "NETWORK_PROVIDERS",
    "PATH_KEYS",
    "USER_CONFIG_NAME",
    "FileRead",
    "ProjectConfig",
    "ScanPath",
    "Settings",
    "confine_config",
    "default_config_text",
    "find_config",
    "find_project",
    "load_config",
    "resolve_settings",
    "trust_config_file",
    "write_default_config",
]

logger = logging.getLogger(__name__)

CONFIG_FILE_NAME = ".knowledge-agent.toml"
USER_CONFIG_NAME = "config.toml"
ENV_HOME = "KNOWLEDGE_AGENT_HOME"
ENV_BACKEND = "KNOWLEDGE_AGENT_BACKEND"
ENV_READ_BACKEND = "KNOWLEDGE_AGENT_READ_BACKEND"
LOCAL_DATA_DIR = ".knowledge-agent"
APP_NAME = "knowledge-agent"

NETWORK_PROVIDERS = frozenset({"openai"})
"""Providers that send text over the network: an untrusted file may not name one."""
ENDPOINT_KEYS = ("base_url", "api_key_env", "api_key")
"""Provider keys naming an endpoint or a secret: never taken from an untrusted file."""
PATH_KEYS = ("cache_dir", "model_dir")
"""Provider keys naming a folder: from an untrusted file only inside its folder."""

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
    "default_top_k",
    "rerank_top_k",
    "enable_rerank",
)
CHUNK_KEYS = tuple(f.name for f in fields(ChunkConfig))
SCAN_KEYS = ("path", "kb", "include", "exclude")


@dataclass(frozen=True)
class ProjectConfig:
    """What a ``.knowledge-agent.toml`` (or the user config file) says; the defaults when
    there is none.

    ``data_dir`` is None unless the file names one (already made absolute), as are the
    ``[[scan]]`` paths and an embeddings ``cache_dir``. ``doc_type_rules`` maps a folder name
    (lower case) to a doc type and replaces the built-in rules.
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
    backend_url: str | None = None
    """``[backend] url``: a ``postgresql://`` URL (or ``"local"``), checked when read."""
    backend_read_url: str | None = None
    """``[backend] read_url``: a hot standby of that server, for searches."""
    origins: Mapping[str, Origin] = field(default_factory=dict, compare=False, hash=False)
    """The file and key that set each setting (``chunking.max_chunk_size``, ``embeddings``
    …); a setting missing here has its default. Scan paths carry their own."""
    not_used: tuple[NotUsed, ...] = field(default=(), compare=False)
    """Keys the files give that have no effect here, with the reason."""


@dataclass(frozen=True)
class FileRead:
    """A settings file whose settings apply: its format, whether the user trusts it, and
    what it asked for that was left out as it is not trusted."""

    path: Path
    format: str
    trusted: bool
    ignored: tuple[str, ...] = ()


@dataclass(frozen=True)
class Settings:
    """The resolved data folder, why it was chosen, and the settings that apply.

    ``origin`` is one of ``"option"``, ``"environment"``, ``"project file"``, ``"user config
    file"`` or ``"user data folder"``; ``config_file`` is the file whose settings ``config``
    holds (the project file or the user config file), if any. ``ignored`` names what an
    untrusted project file said that leaves its folder and was left out; ``warning`` is the
    one line to show the user about it (None when nothing was left out).
    """

    data_dir: Path
    origin: str
    config_file: Path | None = None
    config: ProjectConfig = field(default_factory=ProjectConfig)
    ignored: tuple[str, ...] = ()
    warning: str | None = None
    backend: str | None = None
    """Where the knowledge base lives when not in ``data_dir``: a server URL (None: the
    folder)."""
    read_backend: str | None = None
    """A hot standby of :attr:`backend` that answers searches (None: the server itself)."""
    backend_origin: str | None = None
    """What chose :attr:`backend`: ``--backend``, ``$KNOWLEDGE_AGENT_BACKEND`` or the file."""
    read_backend_origin: str | None = None
    """What chose :attr:`read_backend`, likewise."""
    files: tuple[FileRead, ...] = ()
    """Every file whose settings apply (a project's two spec files are read together)."""


# -- finding and resolving ---------------------------------------------------------------


def find_config(start: str | os.PathLike[str]) -> Path | None:
    """The nearest ``.knowledge-agent.toml`` in ``start`` or a folder above it."""
    folder = Path(os.path.abspath(start))
    for candidate in (folder, *folder.parents):
        path = candidate / CONFIG_FILE_NAME
        if path.is_file():
            return path
    return None


def find_project(start: str | os.PathLike[str]) -> tuple[Path, ...]:
    """The settings files of the nearest project from ``start`` upward: its
    ``.knowledge-agent.toml``, else its ``.agentos/kb_config.json`` and 002 ``config.toml``
    (either or both); empty when no folder above holds any."""
    folder = Path(os.path.abspath(start))
    for candidate in (folder, *folder.parents):
        path = candidate / CONFIG_FILE_NAME
        if path.is_file():
            return (path,)
        found = spec_files(candidate)
        if found:
            return found
    return ()


def spec_files(folder: Path) -> tuple[Path, ...]:
    """The 001 and 002 settings files in ``folder``: ``.agentos/kb_config.json`` and a
    ``config.toml`` with 002's tables."""
    found = []
    kb_config = folder / agentos.KB_CONFIG_FOLDER / agentos.KB_CONFIG_NAME
    if kb_config.is_file():
        found.append(kb_config)
    toml = folder / knowledge_toml.KNOWLEDGE_TOML_NAME
    if toml.is_file():
        try:
            text = toml.read_bytes().decode("utf-8", errors="replace")
        except OSError:
            text = ""  # unreadable: not known to be 002's, so not ours to complain about
        if knowledge_toml.is_knowledge_toml(text):
            found.append(toml)
    return tuple(found)


def resolve_settings(
    data_dir: str | os.PathLike[str] | None = None,
    *,
    backend: str | None = None,
    read_backend: str | None = None,
    cwd: str | os.PathLike[str] | None = None,
    environ: Mapping[str, str] | None = None,
    trust: TrustStore | None = None,
) -> Settings:
    """The data folder, the backend and the settings by the rules in the module docstring.

    ``trust`` holds the user's trust records; by default those in the user config folder
    (``$KNOWLEDGE_AGENT_CONFIG_DIR`` in ``environ`` overrides it).
    """
    env = os.environ if environ is None else environ
    settings = _folder_settings(data_dir, cwd=cwd, environ=env, trust=trust)
    where = f"of {settings.config_file}"
    chosen = _first_server(
        ("--backend", backend),
        (f"${ENV_BACKEND}", env.get(ENV_BACKEND)),
        (f"[backend] url {where}", settings.config.backend_url),
    )
    if chosen is None:
        return settings
    standby = _first_server(
        ("--read-backend", read_backend),
        (f"${ENV_READ_BACKEND}", env.get(ENV_READ_BACKEND)),
        (f"[backend] read_url {where}", settings.config.backend_read_url),
    )
    return dataclasses.replace(
        settings,
        backend=chosen[0],
        backend_origin=chosen[1],
        read_backend=standby[0] if standby else None,
        read_backend_origin=standby[1] if standby else None,
    )


def _first_server(*candidates: tuple[str, str | None]) -> tuple[str, str] | None:
    """The first URL given among ``(origin, value)`` and its origin; None when it is the
    data folder."""
    for origin, value in candidates:
        if value:
            try:
                label = backend_label(value)
            except ConfigError as exc:
                raise ConfigError(f"{origin}: {exc}") from None
            return None if label == "local" else (value, origin)
    return None


def _folder_settings(
    data_dir: str | os.PathLike[str] | None,
    *,
    cwd: str | os.PathLike[str] | None,
    environ: Mapping[str, str],
    trust: TrustStore | None,
) -> Settings:
    here = Path(os.path.abspath(cwd if cwd is not None else os.getcwd()))
    env = environ
    config_dir = user_config_dir(env)

    def absolute(path: str | os.PathLike[str]) -> Path:
        return Path(os.path.abspath(here / os.path.expanduser(os.fspath(path))))

    if data_dir is not None and os.fspath(data_dir) != "":
        return _user_settings(config_dir, absolute(data_dir), "option")
    home = env.get(ENV_HOME, "")
    if home:
        return _user_settings(config_dir, absolute(home), "environment")
    warning = None
    found = find_project(here)
    if found:
        store = trust if trust is not None else TrustStore(config_dir)
        if found[0].name == CONFIG_FILE_NAME:
            project, warning = _project_settings(found[0], store)
        else:
            project, warning = _spec_settings(found, store)
        if project is not None:
            return project
    # No project file, or one whose data folder leaves its folder: the user's settings.
    settings = _user_settings(config_dir, None, "")
    return dataclasses.replace(settings, warning=warning)


def _user_settings(config_dir: Path, data_dir: Path | None, origin: str) -> Settings:
    """Settings from the user config file (if any) for ``data_dir`` chosen by ``origin``;
    without one, the config file's data folder, else the user data folder."""
    path = config_dir / USER_CONFIG_NAME
    config_file = path if path.is_file() else None
    config = _read_config(path)[1] if config_file is not None else ProjectConfig()
    if data_dir is None and config.data_dir is not None:
        data_dir, origin = config.data_dir, "user config file"
    if data_dir is None:
        data_dir = Path(platformdirs.user_data_dir(APP_NAME, appauthor=False))
        origin = "user data folder"
    files = (FileRead(path, "user config file", True),) if config_file is not None else ()
    return Settings(data_dir, origin, config_file, config, files=files)


def _project_settings(found: Path, store: TrustStore) -> tuple[Settings | None, str | None]:
    """The settings a project file gives, and the warning about what it was refused.

    A trusted file applies whole, an untrusted one without what leaves its folder
    (:func:`confine_config`). None instead of settings when even the default data folder
    beside an untrusted file leaves its folder (a link): it then configures no data folder.
    """
    path = Path(os.path.realpath(found))
    data, config = _read_config(path)
    ignored: tuple[str, ...] = ()
    trusted = store.is_trusted(path, content_digest(data))
    if not trusted:
        config, ignored = confine_config(config, path.parent)
    data_dir = config.data_dir or path.parent / LOCAL_DATA_DIR
    placed = trusted or _inside(data_dir, path.parent)
    if not placed:
        ignored += (f"the data folder {data_dir} (a link leaving the folder)",)
    warning = None
    if ignored:
        state = "has changed since it was trusted" if store.lookup(path) else "is not trusted"
        warning = (
            f"{path} {state}: ignoring {_listing(ignored)}; run `knowledge-agent trust` to use them"
        )
    if not placed:
        return None, warning
    shadowed = tuple(
        NotUsed(spec, "(the whole file)", f"not read: {CONFIG_FILE_NAME} beside it comes first")
        for spec in spec_files(path.parent)
    )
    config = dataclasses.replace(config, not_used=config.not_used + shadowed)
    files = (FileRead(path, CONFIG_FILE_NAME, trusted, ignored),)
    return Settings(data_dir, "project file", path, config, ignored, warning, files=files), warning


def _spec_settings(
    found: tuple[Path, ...], store: TrustStore
) -> tuple[Settings | None, str | None]:
    """The settings a project's 001 and 002 files give together, by the rules of
    :func:`_project_settings`; where both set a setting, ``kb_config.json`` wins."""
    parts: list[SpecFile] = []
    files: list[FileRead] = []
    warnings: list[str] = []
    for path in found:
        data = _read_bytes(path)
        trusted = store.is_trusted(path, content_digest(data))
        part = _read_spec(path, data, trusted=trusted)
        parts.append(part)
        files.append(FileRead(path, part.format, trusted, part.ignored))
        if part.ignored:
            state = "has changed since it was trusted" if store.lookup(path) else "is not trusted"
            warnings.append(f"{path} {state}: ignoring {_listing(part.ignored)}")
    folder = Path(os.path.realpath(_project_folder(found[0])))
    data_dir = folder / LOCAL_DATA_DIR
    ignored = tuple(name for part in parts for name in part.ignored)
    placed = all(file.trusted for file in files) or _inside(data_dir, folder)
    if not placed:
        ignored += (f"the data folder {data_dir} (a link leaving the folder)",)
        untrusted = next(file.path for file in files if not file.trusted)
        warnings.append(f"{untrusted} is not trusted: ignoring {ignored[-1]}")
    warning = None
    if warnings:
        warning = f"{'; '.join(warnings)}; run `knowledge-agent trust` to use them"
    if not placed:
        return None, warning
    config = _merged_config(parts)
    for note in config.not_used:
        logger.info("%s: %s is not used: %s", note.file, note.key, note.reason)
    settings = Settings(
        data_dir, "project file", found[0], config, ignored, warning, files=tuple(files)
    )
    return settings, warning


def _project_folder(path: Path) -> Path:
    """The folder a settings file configures: ``.agentos/``'s parent, or its own."""
    if path.name == agentos.KB_CONFIG_NAME and path.parent.name == agentos.KB_CONFIG_FOLDER:
        return path.parent.parent
    return path.parent


def _read_spec(path: Path, data: bytes, *, trusted: bool) -> SpecFile:
    if path.name == agentos.KB_CONFIG_NAME:
        return agentos.read_kb_config(path, data, trusted=trusted)
    return knowledge_toml.read_knowledge_toml(path, data, trusted=trusted)


def _merged_config(parts: list[SpecFile]) -> ProjectConfig:
    """One configuration from spec files given in order of precedence, first wins."""
    chunking: dict[str, Any] = {}
    search: dict[str, Any] = {}
    origins: dict[str, Origin] = {}
    embeddings = rerank = None
    for part in reversed(parts):  # the first wins: apply it last
        chunking.update(part.chunking)
        search.update(part.search)
        embeddings = part.embeddings if part.embeddings is not None else embeddings
        rerank = part.rerank if part.rerank is not None else rerank
        origins.update({name: Origin(part.path, key) for name, key in part.origins.items()})
    first = parts[0].path
    try:
        chunk_config = ChunkConfig(**chunking)
        search_config = SearchConfig(**search)
    except ConfigError as exc:
        raise ConfigError(f"{first}: {exc}") from exc
    return ProjectConfig(
        scan=tuple(scan for part in parts for scan in part.scan),
        chunk_config=chunk_config,
        search_config=search_config,
        embeddings=embeddings,
        rerank=rerank,
        origins=origins,
        not_used=tuple(note for part in parts for note in part.not_used),
    )


def confine_config(
    config: ProjectConfig, folder: str | os.PathLike[str]
) -> tuple[ProjectConfig, tuple[str, ...]]:
    """``config`` without what leaves ``folder``, and the names of what was left out.

    Left out: a ``data_dir`` or ``[[scan]]`` path whose real path (``..`` and symlinks
    resolved) is outside ``folder``; a ``[backend] url`` naming a server; an
    ``[embeddings]`` or ``[rerank]`` table that names a network provider, an endpoint or an
    environment variable (``base_url``, ``api_key_env``) or a ``cache_dir`` outside
    ``folder`` — the whole table, since part of one is another configuration. Search,
    chunking, doc types and the default knowledge base always stay.
    """
    base = os.path.realpath(folder)
    ignored: list[str] = []
    data_dir = config.data_dir
    if data_dir is not None and not _inside(data_dir, base):
        ignored.append("data_dir")
        data_dir = None
    scan = []
    for entry in config.scan:
        if _inside(entry.path, base):
            scan.append(entry)
        else:
            ignored.append(f"[[scan]] path {entry.path}")
    tables: dict[str, Mapping[str, Any] | None] = {}
    for name in ("embeddings", "rerank"):
        table = getattr(config, name)
        leaving = _leaving_keys(table, base) if table is not None else []
        tables[name] = None if leaving else table
        if leaving:
            ignored.append(f"[{name}] ({', '.join(leaving)})")
    servers = {}
    for key, name in (("backend_url", "url"), ("backend_read_url", "read_url")):
        value = getattr(config, key)
        leaves = value is not None and backend_label(value) != "local"
        servers[key] = None if leaves else value
        if leaves:
            ignored.append(f"[backend] {name}")
    confined = dataclasses.replace(config, data_dir=data_dir, scan=tuple(scan), **servers, **tables)
    left_out = {
        "data_dir": data_dir is None,
        "backend.url": servers["backend_url"] is None,
        "backend.read_url": servers["backend_read_url"] is None,
        **{name: table is None for name, table in tables.items()},
    }
    origins = {name: o for name, o in config.origins.items() if not left_out.get(name, False)}
    return dataclasses.replace(confined, origins=origins), tuple(ignored)


def _leaving_keys(table: Mapping[str, Any], base: str) -> list[str]:
    """What in a provider table reaches beyond ``base``: its keys, or its provider."""
    leaving = [key for key in ENDPOINT_KEYS if key in table]
    leaving += [
        key
        for key in PATH_KEYS
        if key in table and not (isinstance(table[key], str) and _inside(table[key], base))
    ]
    provider = table.get("provider")
    if not leaving and provider in NETWORK_PROVIDERS:
        leaving.append(f"provider {provider!r}")
    return leaving


def _listing(names: tuple[str, ...]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def trust_config_file(
    path: str | os.PathLike[str], store: TrustStore
) -> tuple[TrustRecord, tuple[str, ...]]:
    """Trust a project file as it is now; ``ConfigError`` when it is not a valid one.

    Returns the record and what the trust lets the file do: the settings it names that
    leave its folder (empty when it needs no trust).
    """
    real = Path(os.path.realpath(os.path.expanduser(os.fspath(path))))
    if real.name == CONFIG_FILE_NAME or real not in spec_files(_project_folder(real)):
        data, config = _read_config(real)
        unlocked = confine_config(config, real.parent)[1]
    else:  # 001's kb_config.json or 002's config.toml: checked as such
        data = _read_bytes(real)
        unlocked = _read_spec(real, data, trusted=False).ignored
    return store.trust(real, data), unlocked


# -- reading a project file --------------------------------------------------------------


def load_config(path: str | os.PathLike[str]) -> ProjectConfig:
    """Read and check a project file, everything it says (trusted or not); ``ConfigError``
    naming the file and the key."""
    return _read_config(Path(os.path.abspath(path)))[1]


def _read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from exc


def _read_config(path: Path) -> tuple[bytes, ProjectConfig]:
    """The bytes of a config file and what they say, read once: the bytes a trust record
    checks are the bytes parsed."""
    data = _read_bytes(path)
    try:
        parsed = tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: not UTF-8 ({exc.reason})") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from exc
    try:
        config = _project_config(parsed, path.parent)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from exc
    scan = tuple(
        dataclasses.replace(entry, origin=Origin(path, f"scan[{number}]"))
        for number, entry in enumerate(config.scan, start=1)
    )
    origins = {name: Origin(path, name) for name in _given_settings(parsed)}
    return data, dataclasses.replace(config, scan=scan, origins=origins)


def _given_settings(parsed: Mapping[str, Any]) -> list[str]:
    """The settings a parsed file gives, by the names ``config --show`` lists them under."""
    names = [key for key in ("data_dir", "default_kb", "doc_types") if key in parsed]
    names += [name for name in ("embeddings", "rerank") if name in parsed]
    for table in ("chunking", "search", "backend"):
        if isinstance(parsed.get(table), dict):
            names += [f"{table}.{key}" for key in parsed[table]]
    return names


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
        "backend",
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
        embeddings=_provider(data, "embeddings", base),
        rerank=_provider(data, "rerank", base),
        backend_url=_backend_url(data, "url"),
        backend_read_url=_backend_url(data, "read_url"),
    )


def _backend_url(data: Mapping[str, Any], key: str) -> str | None:
    """``[backend] url`` or ``read_url``, checked: ``"local"`` or a ``postgresql://`` URL."""
    table = _table(data, "backend")
    _no_unknown_keys(table, ("url", "read_url"), "backend.")
    url = _string(table, key, "backend.")
    if url is not None:
        try:
            backend_label(url)
        except ConfigError as exc:
            raise ConfigError(f"backend.{key}: {exc}") from None
    return url


def _provider(data: Mapping[str, Any], name: str, base: Path) -> dict[str, Any] | None:
    """An ``[embeddings]`` or ``[rerank]`` table: it must name its provider; its folders
    are relative to the file, like every path in it."""
    if name not in data:
        return None
    table = dict(_table(data, name))
    if not isinstance(table.get("provider"), str):
        raise ConfigError(f'{name}.provider is required, e.g. provider = "wordllama"')
    if "api_key" in table:
        raise ConfigError(
            f"{name}.api_key: keys are not stored in this file; put the key in an "
            "environment variable and name it with api_key_env"
        )
    for key in PATH_KEYS:
        if isinstance(table.get(key), str):
            table[key] = str(_absolute(base, table[key]))
    return table


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
    "strategy": '"headings" (sections, then paragraphs), "lines" or "tokens" (fixed windows)',
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
    "rerank_top_k": "passages a knowledge_semantic_search rerank keeps, unless the call says",
}
# Search settings whose default is "not set": shown commented out, with an example value.
_UNSET_SEARCH_COMMENTS = {
    "default_top_k": (
        10,
        "results without -n / top_k (unset: 10 for search, 5 for knowledge_semantic_search)",
    ),
    "enable_rerank": (
        True,
        "whether knowledge_semantic_search reranks unless the call says (unset: with a [rerank])",
    ),
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
        "# What reaches beyond this folder (a network provider, api_key_env, a path outside",
        "# it) applies only once you run `knowledge-agent trust`; an edit asks for it again.",
        "",
        "# Folder holding the database and the indexes, relative to this file.",
        f"data_dir = {_toml_value(LOCAL_DATA_DIR)}",
        "# Knowledge base that `add` and `watch` write to when --kb is not given.",
        f"default_kb = {_toml_value(defaults.default_kb)}",
        "",
        "# How documents are cut into chunks (headings: sizes in characters).",
        "[chunking]",
    ]
    for key, comment in _CHUNK_COMMENTS.items():
        lines.append(f"{key} = {_toml_value(getattr(chunk, key))}  # {comment}")
    lines += [
        '# With strategy = "lines" or "tokens", instead of the sizes above (defaults shown',
        "# for lines; for tokens 400 and 80, a token being a word, a CJK character or a",
        "# punctuation mark):",
        "# chunk_size = 10  # non-blank lines (or tokens) per chunk",
        "# chunk_overlap = 2  # lines (or tokens) neighbouring chunks share",
    ]
    lines += ["", "# How search ranks chunks.", "[search]"]
    for key, comment in _SEARCH_COMMENTS.items():
        lines.append(f"{key} = {_toml_value(getattr(search, key))}  # {comment}")
    for key, (example, comment) in _UNSET_SEARCH_COMMENTS.items():
        lines.append(f"# {key} = {_toml_value(example)}  # {comment}")
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
        '# "wordllama" runs offline (the [embed] extra); "minilm" runs',
        '# all-MiniLM-L6-v2 offline (the README says how to install it); "openai" calls an',
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
        "# The knowledge base in a PostgreSQL database instead of data_dir (the [postgres]",
        "# extra); from a project file only once you trust it.",
        "# [backend]",
        '# url = "postgresql://user@db.example.com/knowledge"',
        '# read_url = "postgresql://user@standby.example.com/knowledge"   # searches',
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
