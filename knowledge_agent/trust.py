"""Which project files the user trusts, recorded in the user's config folder.

As with ``direnv allow`` and ``mise trust``: trusting a file records its real path (symlinks
resolved) and the sha256 of its bytes. A record counts only while the file still holds those
bytes, so an edited file is untrusted again until it is trusted anew. Each record is a small
JSON file in ``<config folder>/trusted/``, named by the sha256 of the path and written under a
temporary name, fsynced and renamed: two ``trust`` commands at once never lose a record, and a
crash never leaves half of one.

The config folder is ``$KNOWLEDGE_AGENT_CONFIG_DIR`` when set, else
``platformdirs.user_config_dir("knowledge-agent")`` (``~/.config/knowledge-agent`` on Linux).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import platformdirs

from knowledge_agent.backends.local.atomic_files import fsync_directory, write_atomically
from knowledge_agent.errors import ConfigError

__all__ = ["ENV_CONFIG_DIR", "TrustRecord", "TrustStore", "content_digest", "user_config_dir"]

logger = logging.getLogger(__name__)

ENV_CONFIG_DIR = "KNOWLEDGE_AGENT_CONFIG_DIR"
APP_NAME = "knowledge-agent"
TRUSTED_FOLDER = "trusted"


def user_config_dir(environ: Mapping[str, str] | None = None) -> Path:
    """The user's config folder: ``$KNOWLEDGE_AGENT_CONFIG_DIR``, else the platform's."""
    env = os.environ if environ is None else environ
    override = env.get(ENV_CONFIG_DIR, "")
    if override:
        return Path(os.path.abspath(os.path.expanduser(override)))
    return Path(platformdirs.user_config_dir(APP_NAME, appauthor=False))


def content_digest(data: bytes) -> str:
    """The sha256 of a file's bytes, as hex."""
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class TrustRecord:
    """A trusted file: its real path and the sha256 of the bytes that were trusted."""

    path: Path
    sha256: str


class TrustStore:
    """The trust records under one config folder (``folder/trusted/``)."""

    def __init__(self, folder: str | os.PathLike[str]) -> None:
        self.folder = Path(folder)

    @property
    def records_dir(self) -> Path:
        return self.folder / TRUSTED_FOLDER

    def lookup(self, path: str | os.PathLike[str]) -> TrustRecord | None:
        """The record for ``path`` (resolved to its real path), or None.

        An unreadable or malformed record counts as none: it can only withhold trust.
        """
        real = _real(path)
        record_file = self._record_file(real)
        try:
            data = json.loads(record_file.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            logger.warning("ignoring the unreadable trust record %s: %s", record_file, exc)
            return None
        if (
            not isinstance(data, dict)
            or data.get("path") != os.fspath(real)
            or not isinstance(data.get("sha256"), str)
        ):
            logger.warning("ignoring the malformed trust record %s", record_file)
            return None
        return TrustRecord(real, data["sha256"])

    def is_trusted(self, path: str | os.PathLike[str], sha256: str) -> bool:
        """Whether ``path`` is trusted with exactly the content whose digest is ``sha256``."""
        record = self.lookup(path)
        return record is not None and record.sha256 == sha256

    def trust(self, path: str | os.PathLike[str], data: bytes) -> TrustRecord:
        """Record ``path`` (its real path) as trusted with the content ``data``.

        The caller passes the bytes it read and checked, so what is trusted is exactly what
        was looked at, even if the file changes meanwhile.
        """
        record = TrustRecord(_real(path), content_digest(data))
        text = json.dumps({"path": os.fspath(record.path), "sha256": record.sha256}, indent=2)
        try:
            self.records_dir.mkdir(parents=True, exist_ok=True)
            write_atomically(
                self._record_file(record.path), lambda handle: handle.write(text.encode())
            )
            fsync_directory(self.records_dir)
        except OSError as exc:
            raise ConfigError(
                f"{self.records_dir}: cannot record trust: {exc.strerror or exc}"
            ) from exc
        return record

    def revoke(self, path: str | os.PathLike[str]) -> bool:
        """Forget the record of ``path``; whether there was one."""
        record_file = self._record_file(_real(path))
        try:
            record_file.unlink()
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise ConfigError(f"{record_file}: cannot remove: {exc.strerror or exc}") from exc
        fsync_directory(self.records_dir)
        return True

    def _record_file(self, real: Path) -> Path:
        name = hashlib.sha256(os.fsencode(real)).hexdigest()
        return self.records_dir / f"{name}.json"


def _real(path: str | os.PathLike[str]) -> Path:
    return Path(os.path.realpath(os.path.expanduser(os.fspath(path))))
