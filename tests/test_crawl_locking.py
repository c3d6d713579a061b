"""A crawl holds no lock while it waits on the network: searches and other writers go on.

Every site is served on 127.0.0.1 by a small server whose gated pages hold their answer
until the test releases them, so "while the crawl is blocked" is a fact, not a timing.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from knowledge_agent import KnowledgeAgentCore
from knowledge_agent.errors import IngestError
from knowledge_agent.ingest import interrupts
from knowledge_agent.ingest.report import CollectInterrupted, CollectProgress

GUARD_S = 60.0  # hang guard: nothing here waits this long when the behaviour holds
CRAWL = {"max_depth": 1, "timeout": 2 * GUARD_S}  # a blocked request outlives every guard


@dataclass
class Gate:
    """A page's answer held back: ``arrived`` once requested, sent once ``opened``."""

    arrived: threading.Event = field(default_factory=threading.Event)
    opened: threading.Event = field(default_factory=threading.Event)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def do_GET(self) -> None:
        site = self.server.site
        path = urlsplit(self.path).path
        gate = site.take_gate(path)
        if gate is not None:
            gate.arrived.set()
            gate.opened.wait(GUARD_S)
        body = site.pages.get(path)
        self.send_response(200 if body is not None else 404)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body or b"")))
        self.end_headers()
        self.wfile.write(body or b"")

    def log_message(self, format: str, *args: object) -> None:
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    site: GatedSite


class GatedSite:
    """Pages by path; a gated page's next request waits for its gate (once)."""

    def __init__(self) -> None:
        self.pages: dict[str, bytes] = {}
        self._gates: dict[str, Gate] = {}
        self._lock = threading.Lock()
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.site = self

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}{path}"

    def page(self, path: str, title: str, words: str, links: tuple[str, ...] = ()) -> None:
        anchors = "".join(f'<a href="{link}">{link}</a> ' for link in links)
        html = f"<title>{title}</title><main><p>The {words} page.</p>{anchors}</main>"
        self.pages[path] = html.encode()

    def gate(self, path: str) -> Gate:
        """Hold the next answer at ``path`` until the returned gate is opened."""
        with self._lock:
            gate = self._gates[path] = Gate()
        return gate

    def take_gate(self, path: str) -> Gate | None:
        with self._lock:
            return self._gates.pop(path, None)

    def __enter__(self) -> GatedSite:
        threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True).start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        with self._lock:
            for gate in self._gates.values():
                gate.opened.set()
        self._server.shutdown()
        self._server.server_close()


class Background:
    """``run`` on a thread; :meth:`result` joins it (hang guard) and returns or raises."""

    def __init__(self, run: Callable[[], Any]) -> None:
        self._run = run
        self.value: Any = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._target, daemon=True)
        self.thread.start()

    def _target(self) -> None:
        try:
            self.value = self._run()
        except BaseException as exc:
            self.error = exc

    def result(self) -> Any:
        self.thread.join(GUARD_S)
        assert not self.thread.is_alive(), "still running after the hang guard"
        if self.error is not None:
            raise self.error
        return self.value


_CHILD = """
import json, sys
from knowledge_agent import KnowledgeAgentCore
DATA, ARG = sys.argv[1], sys.argv[2]
{body}
"""


def in_child(body: str, data_dir: Path, arg: str = "") -> Any:
    """Run ``body`` in another process with DATA and ARG; its last stdout line as JSON."""
    code = _CHILD.format(body=textwrap.dedent(body))
    done = subprocess.run(
        [sys.executable, "-c", code, str(data_dir), arg],
        capture_output=True,
        text=True,
        timeout=GUARD_S,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def progress_until(
    site: GatedSite, *paths: str
) -> tuple[Callable[[CollectProgress], None], threading.Event]:
    """A progress callback, and an event set once each of ``paths`` was reported processed
    (which a crawl reports once the page is committed to SQLite, before indexing it and
    releasing the write lock)."""
    waiting = {site.url(path) for path in paths}
    committed = threading.Event()

    def progress(event: CollectProgress) -> None:
        if event.status == "processed":
            waiting.discard(event.path)
            if not waiting:
                committed.set()

    return progress, committed


def titles(core: KnowledgeAgentCore, query: str) -> list[str]:
    return [result.item.title for result in core.search(query, limit=10)]


@pytest.fixture
def site() -> Iterator[GatedSite]:
    with GatedSite() as gated:
        gated.page("/", "Home", "frontdoor", ("/a.html", "/b.html", "/slow.html"))
        gated.page("/a.html", "Alpha", "zorblatt")
        gated.page("/b.html", "Beta", "quazzle")
        gated.page("/slow.html", "Slow", "snailmail")
        yield gated


@pytest.fixture
def kb(tmp_path: Path) -> Path:
    """A data folder holding one note stored before any crawl."""
    data_dir = tmp_path / "kb"
    with KnowledgeAgentCore(data_dir) as core:
        core.add_text("a note stored before the crawl tokprior", title="prior note")
    return data_dir


@pytest.mark.parametrize("how", ["collect", "sync"])
def test_searches_and_writers_go_on_while_a_fetch_is_blocked(
    site: GatedSite, kb: Path, how: str
) -> None:
    with KnowledgeAgentCore(kb) as core:
        start = site.url("/")
        if how == "sync":  # a doc source crawled once, then re-crawled by sync
            core.collect_knowledge(start, crawl=CRAWL)
        gate = site.gate("/slow.html")
        if how == "sync":
            crawl = Background(lambda: core.sync(full=True))
        else:
            crawl = Background(lambda: core.collect_knowledge(start, crawl=CRAWL))
        assert gate.arrived.wait(GUARD_S), "the crawl never asked for the page"

        # (a) a search in another thread of this process answers, with what was stored.
        search = Background(lambda: titles(core, "tokprior"))
        assert search.result() == ["prior note"]
        # (b) so does a search in another process on the same data folder.
        found = in_child(
            "with KnowledgeAgentCore(DATA) as core:\n"
            "    print(json.dumps([r.item.title for r in core.search(ARG)]))",
            kb,
            "tokprior",
        )
        assert found == ["prior note"]
        # (c) and a write in another process commits: the write lock is free.
        in_child(
            "with KnowledgeAgentCore(DATA, lock_timeout=30) as core:\n"
            "    core.add_text('written during the crawl tokchild', title='child note')\n"
            "print(json.dumps('ok'))",
            kb,
        )
        assert crawl.thread.is_alive() and not gate.opened.is_set()  # still blocked

        gate.opened.set()
        report = crawl.result()
        assert not report.failed
        assert report.processed == 4  # sync's full re-crawl processes every page again
        assert titles(core, "snailmail") == ["Slow"]
        assert titles(core, "zorblatt") == ["Alpha"]
        assert titles(core, "tokchild") == ["child note"]
        status = core.check()
        assert status.consistent, status.problems
        assert status.items == 6


def test_pages_are_committed_in_groups_as_they_arrive(site: GatedSite, kb: Path) -> None:
    gate = site.gate("/slow.html")
    progress, committed = progress_until(site, "/a.html", "/b.html")

    with KnowledgeAgentCore(kb) as core:
        start = site.url("/")
        crawl = Background(lambda: core.collect_knowledge(start, crawl=CRAWL, progress=progress))
        assert gate.arrived.wait(GUARD_S)
        assert committed.wait(GUARD_S), "the pages that arrived were not committed"
        # The first group is searchable while the crawl still waits for the last page.
        assert titles(core, "zorblatt") == ["Alpha"]
        assert titles(core, "quazzle") == ["Beta"]
        assert titles(core, "snailmail") == []
        assert crawl.thread.is_alive()
        gate.opened.set()
        report = crawl.result()
        assert report.processed == 4 and not report.failed
        assert titles(core, "snailmail") == ["Slow"]


def test_an_interrupted_crawl_keeps_what_it_committed(site: GatedSite, kb: Path) -> None:
    gate = site.gate("/slow.html")
    progress, committed = progress_until(site, "/a.html", "/b.html")

    with KnowledgeAgentCore(kb) as core:
        start = site.url("/")
        crawl = Background(lambda: core.collect_knowledge(start, crawl=CRAWL, progress=progress))
        try:
            assert committed.wait(GUARD_S)
            interrupts.interrupt_requested_event.set()  # what the Ctrl-C handler does
            with pytest.raises(CollectInterrupted) as caught:
                crawl.result()
        finally:
            interrupts.interrupt_requested_event.clear()
        assert not gate.opened.is_set()  # it stopped without waiting for the blocked page
        report = caught.value.report
        assert report.processed == 3  # the home page, a and b: the first group
        assert core.storage.count_items() == 1 + report.processed
        assert titles(core, "quazzle") == ["Beta"]
        gate.opened.set()
        again = core.collect_knowledge(start, crawl=CRAWL)
        assert (again.processed, again.unchanged) == (1, 3)
        assert titles(core, "snailmail") == ["Slow"]


def test_a_crawl_killed_between_groups_leaves_a_sound_base(site: GatedSite, kb: Path) -> None:
    site.gate("/slow.html")  # never opened while the crawl lives
    code = _CHILD.format(
        body="def progress(event):\n"
        "    if event.status == 'processed':\n"
        "        print(event.path, flush=True)\n"
        "with KnowledgeAgentCore(DATA) as core:\n"
        "    core.collect_knowledge(ARG, crawl={'max_depth': 1, 'timeout': 120}, progress=progress)"
    )
    crawl = subprocess.Popen(
        [sys.executable, "-c", code, str(kb), site.url("/")], stdout=subprocess.PIPE, text=True
    )
    waiting = {site.url("/a.html"), site.url("/b.html")}
    committed = threading.Event()

    def read() -> None:
        assert crawl.stdout is not None
        for line in crawl.stdout:
            waiting.discard(line.strip())
            if not waiting:
                committed.set()

    threading.Thread(target=read, daemon=True).start()
    try:
        assert committed.wait(GUARD_S), "the crawl committed nothing while a fetch was blocked"
    finally:
        crawl.kill()  # mid-crawl, perhaps mid-indexing: no cleanup of any kind
        crawl.wait(GUARD_S)
    with KnowledgeAgentCore(kb) as core:
        status = core.check()
        assert status.consistent, status.problems
        assert status.items == 1 + 3  # the note, and the home page, a and b
        assert titles(core, "quazzle") == ["Beta"]


def test_a_page_another_process_stored_meanwhile_keeps_one_item(site: GatedSite, kb: Path) -> None:
    site.page("/", "Home", "frontdoor")
    start = site.url("/")
    with KnowledgeAgentCore(kb) as core:
        core.collect_knowledge(start, crawl=CRAWL)
        # The home page now links a new page; this crawl read the rows before it existed.
        site.page("/", "Home", "frontdoor", ("/new.html",))
        site.page("/new.html", "New", "freshling")
        gate = site.gate("/new.html")
        home_stored = threading.Event()

        def progress(event: CollectProgress) -> None:
            if event.path == start and event.status == "processed":
                home_stored.set()

        crawl = Background(lambda: core.collect_knowledge(start, crawl=CRAWL, progress=progress))
        assert gate.arrived.wait(GUARD_S)
        # Its group holding the changed home page is committed while new.html is blocked.
        assert home_stored.wait(GUARD_S)
        # Another process crawls the same source meanwhile and stores the new page first.
        other = in_child("with KnowledgeAgentCore(DATA, lock_timeout=30) as core:\n"
                         "    report = core.collect_knowledge(ARG, crawl={'max_depth': 1})\n"
                         "print(json.dumps(report.processed))", kb, start)  # fmt: skip
        assert other == 1
        gate.opened.set()
        crawl.result()
        new_url = site.url("/new.html")
        [item] = core.items_at(new_url)  # one item for the page, not an orphan beside it
        row = core.storage.doc_sources.get_doc_page("default", new_url)
        assert row is not None and row.item_id == item.id
        assert titles(core, "freshling") == ["New"]
        assert core.check().consistent


def test_a_source_removed_during_its_crawl_is_not_brought_back(site: GatedSite, kb: Path) -> None:
    gate = site.gate("/slow.html")
    with KnowledgeAgentCore(kb) as core:
        start = site.url("/")
        crawl = Background(lambda: core.collect_knowledge(start, crawl=CRAWL))
        assert gate.arrived.wait(GUARD_S)
        in_child(
            "with KnowledgeAgentCore(DATA, lock_timeout=30) as core:\n"
            "    print(json.dumps(core.remove_source(ARG)))",
            kb,
            start,
        )
        gate.opened.set()
        # Whether the start page was stored before the removal depends on the machine: a
        # first crawl that kept nothing says why by raising, else its report does.
        try:
            reasons = [issue.reason for issue in crawl.result().failed]
        except IngestError as exc:
            reasons = [str(exc)]
        assert any("removed while it was being crawled" in reason for reason in reasons)
        assert core.doc_sources() == []
        assert [item.title for item in core.list_items()] == ["prior note"]
        assert core.check().consistent


def test_an_unchanged_page_another_process_removed_meanwhile_stays_removed(
    site: GatedSite, kb: Path
) -> None:
    site.page("/", "Home", "frontdoor", ("/a.html",))
    start, page_url = site.url("/"), site.url("/a.html")
    with KnowledgeAgentCore(kb) as core:
        core.collect_knowledge(start, crawl=CRAWL)
        gate = site.gate("/a.html")
        crawl = Background(lambda: core.collect_knowledge(start, crawl=CRAWL))
        assert gate.arrived.wait(GUARD_S)
        in_child(
            "with KnowledgeAgentCore(DATA, lock_timeout=30) as core:\n"
            "    print(json.dumps(core.delete_knowledge_item(core.items_at(ARG)[0].id)))",
            kb,
            page_url,
        )
        gate.opened.set()
        report = crawl.result()
        # The answer confirms a text that is no longer stored: the removal stands.
        [issue] = report.skipped
        assert issue.path == page_url and "another writer" in issue.reason
        assert core.items_at(page_url) == [] and titles(core, "zorblatt") == []
        # The next crawl compares with what is stored now, and brings the page back.
        again = core.collect_knowledge(start, crawl=CRAWL)
        assert (again.processed, again.unchanged) == (1, 1)
        assert titles(core, "zorblatt") == ["Alpha"]
        assert core.check().consistent
