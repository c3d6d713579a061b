"""Backends: where a knowledge base is stored and indexed, behind knowledge_agent.protocols.

``local`` (the default) is a data folder; a ``postgresql://`` URL is one database on a
PostgreSQL server (the ``[postgres]`` extra).
"""

from __future__ import annotations

import urllib.parse

from knowledge_agent.errors import ConfigError

__all__ = ["SERVER_SCHEMES", "backend_label", "redacted"]

SERVER_SCHEMES = ("postgresql", "postgres")


def redacted(url: str) -> str:
    """``url`` without its password, to name it in messages and status."""
    parts = urllib.parse.urlsplit(url)
    if not parts.password:
        return url
    host = parts.netloc.rpartition("@")[2]
    user = urllib.parse.quote(parts.username or "", safe="")
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


def backend_label(backend: str | None) -> str:
    """``"local"`` for the data folder (None, "" or "local"), else the server URL without its
    password; anything else is a ConfigError naming the choices."""
    if backend is None:
        return "local"
    if not isinstance(backend, str):
        raise ConfigError(f"backend must be 'local' or a postgresql:// URL, got {backend!r}")
    if backend.strip() in ("", "local"):
        return "local"
    scheme = backend.partition("://")[0].lower()
    if scheme not in SERVER_SCHEMES:
        raise ConfigError(
            f"backend must be 'local' or a postgresql:// URL, got {redacted(backend)!r}"
        )
    return redacted(backend)
