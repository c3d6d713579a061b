"""A real PostgreSQL server for the tests: one per test session (benchmarks/pg_server.py), and
an empty database per test. A server that cannot start fails the tests that need it, naming
why: they never pass by being skipped."""

from __future__ import annotations

from benchmarks.pg_server import PostgresServer, database_of, started

__all__ = ["PostgresServer", "database_of", "started"]
