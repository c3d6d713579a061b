"""Fixtures shared by several test modules; a module may still define its own of the same name."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import settings
from postgres import PostgresServer, started
from web_site import SiteServer

from knowledge_agent import KnowledgeAgentCore
from knowledge_agent.ingest import interrupts
from knowledge_agent.protocols import Storage
from knowledge_agent.storage import SQLiteStorageManager

# Tests assert behaviour, never time: Hypothesis's per-example deadline (200 ms) would fail a
# correct test on a loaded machine.
settings.register_profile("knowledge-agent", deadline=None)
settings.load_profile("knowledge-agent")


def _sendable(text: str) -> str:
    """``text`` with lone surrogates (file names of undecodable bytes, as the library logs
    them) written as escapes: pytest-xdist sends reports as strict UTF-8."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A test's captured output and logs reach the report in a form a worker can send."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    report.sections = [(title, _sendable(text)) for title, text in report.sections]


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """A knowledge base's data dir, ``tmp_path / "data"``, not created yet."""
    return tmp_path / "data"


@pytest.fixture
def core() -> Iterator[KnowledgeAgentCore]:
    """An in-memory core that extracts files in this process (``workers=1``); closed after."""
    with KnowledgeAgentCore(workers=1) as knowledge_base:
        yield knowledge_base


@pytest.fixture
def storage() -> Iterator[SQLiteStorageManager]:
    """An empty in-memory SQLiteStorageManager; closed after."""
    with SQLiteStorageManager() as manager:
        yield manager


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """One real PostgreSQL server for the session (``tests/postgres.py``)."""
    yield from started()


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> Iterator[str]:
    """The URL of an empty database of its own for one test; dropped after."""
    url = postgres_server.new_database()
    yield url
    postgres_server.drop_database(url)


@pytest.fixture(params=["sqlite", "postgresql"])
def open_storage(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], Storage]:
    """Opens a new storage on one empty database each call, of every backend in turn: a
    file in ``tmp_path`` (SQLite), or a database of its own on the test server."""
    if request.param == "sqlite":
        path = tmp_path / "storage.sqlite3"
        return lambda: SQLiteStorageManager(path)
    from knowledge_agent.backends.postgres.storage import PostgresStorage

    url = request.getfixturevalue("postgres_url")
    return lambda: PostgresStorage(url)


@pytest.fixture(params=["local", "postgresql"])
def open_core(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[Callable[..., KnowledgeAgentCore]]:
    """Opens a new, empty knowledge base each call (``KnowledgeAgentCore`` options as
    keywords), on every backend in turn: a data folder in ``tmp_path``, or a database of its
    own on the test server. Every one opened is closed after."""
    opened: list[KnowledgeAgentCore] = []

    def open_(**options: object) -> KnowledgeAgentCore:
        if request.param == "local":
            core = KnowledgeAgentCore(tmp_path / f"kb{len(opened)}", **options)  # type: ignore[arg-type]
        else:
            url = request.getfixturevalue("postgres_server").new_database()
            core = KnowledgeAgentCore(backend=url, **options)  # type: ignore[arg-type]
        opened.append(core)
        return core

    yield open_
    for core in opened:
        core.close()


@pytest.fixture
def backend_storage(open_storage: Callable[[], Storage]) -> Iterator[Storage]:
    """An empty storage of every backend in turn (``open_storage``); closed after."""
    opened = open_storage()
    try:
        yield opened
    finally:
        opened.close()


@pytest.fixture
def server() -> Iterator[SiteServer]:
    """A local web site on 127.0.0.1 (``tests/web_site.py``) to crawl; stopped after."""
    with SiteServer() as site:
        yield site


@pytest.fixture(autouse=True)
def _no_ctrl_c_left_over() -> Iterator[None]:
    """A test that plays a Ctrl-C (sets the interrupt event the SIGINT handler sets) never
    leaves it for the next: outside the command line's handler nothing clears it."""
    yield
    interrupts.interrupt_requested_event.clear()


@pytest.fixture(autouse=True)
def user_config(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty user config folder for every test (``$KNOWLEDGE_AGENT_CONFIG_DIR``): trust
    records and ``config.toml`` never come from, or go to, the real one."""
    folder = tmp_path_factory.mktemp("user-config")
    monkeypatch.setenv("KNOWLEDGE_AGENT_CONFIG_DIR", str(folder))
    # Also where a test passes its own environment without the variable.
    monkeypatch.setattr("platformdirs.user_config_dir", lambda *args, **kwargs: str(folder))
    return folder
