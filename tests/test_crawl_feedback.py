"""What a crawl tells its user: sitemap URLs left out as on another origin and what to do,
a start URL that fails (exit 1, nothing left behind), crawled pages counted as sources,
and progress lines that do not print an unknown total as 0.

Every site is served on 127.0.0.1 by ``tests/web_site.py``.
"""

from __future__ import annotations

import io
import json
import socket
from pathlib import Path

import pytest
from click.testing import CliRunner
from web_site import SiteServer, make_doc_site

from knowledge_agent import KnowledgeAgentCore
from knowledge_agent import cli_render as render
from knowledge_agent.cli import cli
from knowledge_agent.errors import IngestError
from knowledge_agent.ingest.report import CollectProgress

PUBLISHED = "https://docs.example.com"  # the site_url a static site generator was given


def serve_built_site(server: SiteServer) -> None:
    """A site built for another address: its pages here, its sitemap naming the other."""
    server.set_page("/", '<title>Home</title><p>The heron home.</p><a href="guide/">Guide</a>')
    server.set_page("/guide/", "<title>Guide</title><p>The egret guide.</p>")
    server.set_sitemap("/sitemap.xml", [f"{PUBLISHED}/", f"{PUBLISHED}/guide/"])


def test_sitemap_urls_on_another_origin_are_counted_with_what_to_do(
    server: SiteServer, core: KnowledgeAgentCore
) -> None:
    serve_built_site(server)

    report = core.collect_knowledge(server.url("/sitemap.xml"), kb="web")

    assert (report.processed, report.failed, report.skipped) == (0, [], [])
    assert report.notes == [
        f"2 sitemap URLs on another origin skipped ({PUBLISHED}): crawl the site from one "
        f"of its pages instead ({server.base_url}/), or let the crawl leave the start "
        "URL's origin (--any-origin, same_origin=False) to fetch them there"
    ]
    assert server.hits("/") == server.hits("/guide/") == 0
    # The advice works: from a page, the site's own links are followed.
    followed = core.collect_knowledge(server.url("/"), kb="web")
    assert followed.processed == 2 and not followed.notes


def test_the_command_line_prints_the_note_and_json_carries_it(
    server: SiteServer, tmp_path: Path
) -> None:
    serve_built_site(server)
    base = ["--data-dir", str(tmp_path / "data")]
    runner = CliRunner()

    shown = runner.invoke(cli, [*base, "add", server.url("/sitemap.xml")])
    as_json = runner.invoke(cli, [*base, "add", server.url("/sitemap.xml"), "--json"])

    assert shown.exit_code == 0 and "note: 2 sitemap URLs on another origin skipped" in shown.output
    assert json.loads(as_json.output)["notes"][0].startswith("2 sitemap URLs on another origin")


def closed_port() -> int:
    """A loopback port where nothing listens."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.parametrize("case", ["404", "refused", "unknown host"])
def test_a_start_url_that_fails_exits_1_with_one_line_and_leaves_nothing(
    server: SiteServer, tmp_path: Path, case: str
) -> None:
    url = {
        "404": server.url("/missing/"),
        "refused": f"http://127.0.0.1:{closed_port()}/docs/",
        "unknown host": "http://docs.nowhere.invalid/",
    }[case]
    base = ["--data-dir", str(tmp_path / "data")]
    runner = CliRunner()

    added = runner.invoke(cli, [*base, "add", url, "--kb", "web", "--timeout", "5"])

    assert added.exit_code == 1
    [line] = added.output.splitlines()
    assert line.startswith(f"Error: {url}: ")
    if case == "404":
        assert line.endswith("HTTP 404")
    elif case == "refused":
        assert line.endswith("connection refused")
    kbs = json.loads(runner.invoke(cli, [*base, "kb", "list", "--json"]).output)
    assert kbs == {"knowledge_bases": []}


def test_a_failed_start_url_keeps_the_knowledge_base_it_was_added_to(
    server: SiteServer, core: KnowledgeAgentCore
) -> None:
    core.add_text("The kingfisher note.", kb="web")
    with pytest.raises(IngestError) as raised:
        core.collect_knowledge(server.url("/missing/"), kb="web")
    assert raised.value.reason == "HTTP 404"
    assert core.doc_sources() == [] and [info.name for info in core.list_kbs()] == ["web"]
    assert core.search("kingfisher")


def test_kb_list_counts_crawled_pages_as_sources_and_names_the_start_url(
    server: SiteServer, tmp_path: Path
) -> None:
    site = make_doc_site(server, 12)
    base = ["--data-dir", str(tmp_path / "data")]
    runner = CliRunner()
    assert runner.invoke(cli, [*base, "add", site.start_url, "--kb", "web"]).exit_code == 0

    [source] = json.loads(runner.invoke(cli, [*base, "sources", "--json"]).output)["doc_sources"]
    [info] = json.loads(runner.invoke(cli, [*base, "kb", "list", "--json"]).output)[
        "knowledge_bases"
    ]

    assert info["sources"] == source["pages"] == len(site.pages) == info["items"]
    assert info["roots"] == [site.start_url]
    assert info["last_indexed_at"] is not None


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_crawl_progress_off_a_terminal_leaves_out_the_totals_it_does_not_know() -> None:
    stream, clock = io.StringIO(), Clock()
    with render.collect_progress(render.make_console(stream), clock=clock, interval=5) as update:
        assert update is not None
        for done in range(1, 26):  # a crawl: no total of pages or bytes ahead
            clock.now = done * 0.4
            page = CollectProgress(f"https://x.org/{done}", "processed", done, 0, done * 55_000, 0)
            update(page)
    lines = stream.getvalue().splitlines()
    assert lines == [
        "collecting 13 files · 0.7 MB · 2.5 files/s",
        "collected 25 files · 1.4 MB in 0:00:10 (2.5 files/s)",
    ]
