"""The settings in effect and where each came from: what ``knowledge-agent config --show``
prints.

Every setting a settings file can give is listed with its value and its source: a file and
the key it used there (in that file's own spelling), a global option or environment variable
(the data folder and the backend), or the default. Options of one command (``search -n``,
``--kb``, ``--rerank``) win over every file for that command and are not listed. API keys
are never shown.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from knowledge_agent.chunking import ChunkConfig
from knowledge_agent.project_files.model import Origin
from knowledge_agent.settings import SEARCH_KEYS, Settings

__all__ = ["SettingRow", "setting_rows", "settings_report", "settings_text"]

SECRET_KEYS = frozenset({"api_key"})
_HIDDEN = "***"


@dataclass(frozen=True)
class SettingRow:
    """One setting in effect: its value (JSON-ready) and where it came from.

    ``source`` is ``"file"`` (``file`` and ``key`` say where), ``"project folder"`` (the data
    folder beside ``file``), ``"option"`` or ``"environment"`` (``key`` names it) or
    ``"default"``.
    """

    name: str
    value: Any
    source: str
    file: Path | None = None
    key: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "value": self.value,
            "source": self.source,
            "file": None if self.file is None else str(self.file),
            "key": self.key,
        }

    def source_text(self) -> str:
        if self.source == "file":
            return f"{self.file}: {self.key}"
        if self.source == "project folder":
            return f"project folder of {self.file}"
        if self.source in ("option", "environment"):
            return f"{self.source} {self.key}"
        return self.source


def setting_rows(settings: Settings) -> list[SettingRow]:
    """Every setting in effect, in the order ``config --show`` lists them."""
    config = settings.config
    origins = config.origins

    def row(name: str, value: Any) -> SettingRow:
        return _from_origin(name, _plain(value), origins.get(name))

    rows = [_data_dir_row(settings)]
    rows += [
        _server_row("backend", settings.backend or "local", settings.backend_origin, origins),
        _server_row("read_backend", settings.read_backend, settings.read_backend_origin, origins),
        row("default_kb", config.default_kb),
    ]
    chunking = config.chunk_config
    rows += [row(f"chunking.{f.name}", getattr(chunking, f.name)) for f in fields(ChunkConfig)]
    search = config.search_config
    rows += [row(f"search.{key}", getattr(search, key)) for key in SEARCH_KEYS]
    rows.append(row("doc_types", dict(config.doc_type_rules)))
    for name in ("embeddings", "rerank"):
        table = getattr(config, name)
        value = None if table is None else _hidden(table)
        batch = origins.get(f"{name}.batch_size")
        found = _from_origin(name, value, origins.get(name))
        if batch is not None and found.key is not None:  # 002's batch size lives elsewhere
            found = SettingRow(name, value, "file", found.file, f"{found.key}, {batch.key}")
        rows.append(found)
    for scan in config.scan:
        value = {
            "path": str(scan.path),
            "kb": scan.kb,
            "include": list(scan.include),
            "exclude": list(scan.exclude),
        }
        rows.append(_from_origin("scan", value, scan.origin))
    return rows


def settings_report(settings: Settings) -> dict[str, Any]:
    """The ``config --show --json`` object."""
    return {
        "data_dir": str(settings.data_dir),
        "backend": settings.backend,
        "files": [
            {
                "path": str(file.path),
                "format": file.format,
                "trusted": file.trusted,
                "ignored": list(file.ignored),
            }
            for file in settings.files
        ],
        "settings": [row.to_dict() for row in setting_rows(settings)],
        "not_used": [
            {"file": str(note.file), "key": note.key, "reason": note.reason}
            for note in settings.config.not_used
        ],
        "ignored": list(settings.ignored),
        "warning": settings.warning,
    }


def settings_text(settings: Settings) -> list[str]:
    """``config --show`` for people: the files read, a line per setting (name, value,
    source), then what was not used or ignored."""
    lines = ["Files read:"]
    for file in settings.files:
        trust = "trusted" if file.trusted else "not trusted"
        lines.append(f"  {file.path} ({file.format}, {trust})")
    if not settings.files:
        lines.append("  none: every setting has its default")
    rows = setting_rows(settings)
    values = [_text(row.value) for row in rows]
    name_width = max(len(row.name) for row in rows)
    value_width = min(max(len(value) for value in values), 40)
    lines += ["", "Settings in effect (name, value, from):"]
    for row, value in zip(rows, values, strict=True):
        lines.append(f"  {row.name:<{name_width}}  {value:<{value_width}}  {row.source_text()}")
    if settings.config.not_used:
        lines += ["", "Not used:"]
        lines += [f"  {note.file}: {note.key}: {note.reason}" for note in settings.config.not_used]
    if settings.ignored:
        lines += ["", "Ignored until trusted (knowledge-agent trust):"]
        by_file = [(file.path, name) for file in settings.files for name in file.ignored]
        lines += [f"  {path}: {name}" for path, name in by_file]
        named = {name for _, name in by_file}
        lines += [f"  {name}" for name in settings.ignored if name not in named]
    return lines


def _data_dir_row(settings: Settings) -> SettingRow:
    value = str(settings.data_dir)
    origin = settings.config.origins.get("data_dir")
    if settings.origin == "option":
        return SettingRow("data_dir", value, "option", key="--data-dir")
    if settings.origin == "environment":
        return SettingRow("data_dir", value, "environment", key="$KNOWLEDGE_AGENT_HOME")
    if origin is not None:
        return SettingRow("data_dir", value, "file", origin.file, origin.key)
    if settings.origin == "project file":
        return SettingRow("data_dir", value, "project folder", settings.config_file)
    return SettingRow("data_dir", value, "default")


def _server_row(
    name: str, value: str | None, chosen_by: str | None, origins: Mapping[str, Origin]
) -> SettingRow:
    if chosen_by is None:
        return SettingRow(name, value, "default")
    if chosen_by.startswith("--"):
        return SettingRow(name, value, "option", key=chosen_by)
    if chosen_by.startswith("$"):
        return SettingRow(name, value, "environment", key=chosen_by)
    key = "backend.url" if name == "backend" else "backend.read_url"
    return _from_origin(name, value, origins.get(key))


def _from_origin(name: str, value: Any, origin: Origin | None) -> SettingRow:
    if origin is None:
        return SettingRow(name, value, "default")
    return SettingRow(name, value, "file", origin.file, origin.key)


def _hidden(table: Mapping[str, Any]) -> dict[str, Any]:
    return {key: _HIDDEN if key in SECRET_KEYS else _plain(v) for key, v in table.items()}


def _plain(value: Any) -> Any:
    """``value`` as JSON types."""
    if isinstance(value, Mapping):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, (tuple, list)):
        return [_plain(item) for item in value]
    if isinstance(value, Path):
        return str(value)
    return value


def _text(value: Any) -> str:
    if value is None:
        return "(none)"
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))
