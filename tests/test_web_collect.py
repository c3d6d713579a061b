"""Doc sites crawled into a knowledge base: pages as items, re-crawls, errors per page.

Every site is served on 127.0.0.1 by ``tests/web_site.py``; nothing here uses the internet.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from web_site import DocSite, SiteServer, make_doc_site

from knowledge_agent import KnowledgeAgentCore
from knowledge_agent.cli import cli
from knowledge_agent.crawl import CrawlOptions, UrlPolicy
from knowledge_agent.errors import ConfigError, IngestError, NotFoundError
from knowledge_agent.ingest import interrupts, web
from knowledge_agent.ingest.report import CollectInterrupted, CollectProgress

PDF = Path(__file__).resolve().parents[1] / "knowledge_agent" / "samples"


def top_urls(core: KnowledgeAgentCore, query: str) -> list[str]:
    return [result.item.source_uri or "" for result in core.search(query, limit=3)]


def test_a_site_crawled_to_depth_3_with_an_exclude_glob_indexes_exactly_its_pages(
    server: SiteServer, core: KnowledgeAgentCore
) -> None:
    site = make_doc_site(server, 200)
    excluded = site.under("/docs/s2/")
    expected = site.within(3) - excluded
    report = core.collect_knowledge(
        site.start_url, kb="web", crawl={"max_depth": 3}, exclude=["*/docs/s2/*"]
    )
    assert report.processed == len(expected) and not report.failed
    [source] = core.doc_sources()
    assert source.pages == len(expected) and source.kb == "web"
    assert {item.source_uri for item in core.list_items(kb="web", limit=1000)} == {
        server.url(path) for path in expected
    }
    for path in sorted(expected)[::7]:
        page = site.pages[path]
        best = core.search(f"{page.words[1]} {page.words[2]}", limit=1)[0]
        assert best.item.source_uri == page.url
        chunk = core.storage.get_chunk_by_id(best.matched_chunks[0].chunk_id)
        assert chunk is not None and chunk.metadata["url"] == page.url + "#details"
        assert best.item.title == page.title


def test_a_recrawl_processes_the_changed_page_removes_the_vanished_and_adds_the_new(
    server: SiteServer, core: KnowledgeAgentCore
) -> None:
    site = make_doc_site(server, 31)
    core.collect_knowledge(site.start_url, crawl={"max_depth": 2})
    before = {item.source_uri: item.id for item in core.list_items()}
    assert len(before) == len(site.within(2))
    changed, vanished = "/docs/s1/", "/docs/s2/s12/"
    assert changed in before.keys() | {p.replace(server.base_url, "") for p in before}
    # The changed page now links a new page; the vanished one is linked but answers 404.
    html = server_page(server, changed).replace("</main>", '<a href="fresh/">new</a></main>')
    server.set_page(changed, html)
    server.set_page(changed + "fresh/", "<title>Fresh</title><p>A brand new zorblatt page.</p>")
    server.remove(vanished)
    server.reset_hits()

    report = core.collect_knowledge(site.start_url, crawl={"max_depth": 2})

    assert report.processed == 2 and report.removed == 1 and not report.failed
    assert report.unchanged == len(before) - 2
    after = {item.source_uri: item.id for item in core.list_items()}
    assert after[server.url(changed)] == before[server.url(changed)]  # same item id
    assert server.url(changed + "fresh/") in after.keys() - before.keys()
    assert server.url(vanished) not in after
    # Unchanged pages cost one conditional request each and were not re-processed.
    assert len(server.statuses(304)) == report.unchanged
    assert top_urls(core, "zorblatt")[0] == server.url(changed + "fresh/")


def server_page(server: SiteServer, path: str) -> str:
    import urllib.request

    with urllib.request.urlopen(server.url(path), timeout=5) as answer:
        return answer.read().decode("utf-8")


def test_every_bad_page_is_reported_with_its_reason_and_the_rest_is_indexed(
    server: SiteServer, core: KnowledgeAgentCore
) -> None:
    links = [
        "/ok.html", "/missing.html", "/broken.html", "/slow.html", "/big.html", "/image.png",
        "/manual.pdf", "/private/secret.html", "/loop-a", "/notes.md",
    ]  # fmt: skip
    server.set_page("/", "".join(f'<a href="{link}">{link}</a>' for link in links))
    server.set_page("/ok.html", "<title>Fine</title><p>The quokka page is fine.</p>")
    server.set_error("/broken.html", 500)
    server.set_slow("/slow.html", 3.0)
    server.set_big("/big.html", 10 * 1024 * 1024)
    server.set_png("/image.png")
    server.set_pdf("/manual.pdf")
    server.set_robots("User-agent: *\nDisallow: /private/\n")
    server.set_page("/private/secret.html", "<p>secret</p>")
    server.redirect("/loop-a", "/loop-b")
    server.redirect("/loop-b", "/loop-a")
    server.set_page("/notes.md", "# Notes\n\nThe wombat section.\n", content_type="text/markdown")

    report = core.collect_knowledge(server.url("/"), crawl={"max_depth": 1, "timeout": 1.0})

    reasons = {issue.path: issue.reason for issue in [*report.failed, *report.skipped]}
    assert "HTTP 500" in reasons[server.url("/broken.html")]
    assert "timed out" in reasons[server.url("/slow.html")]
    assert "larger than" in reasons[server.url("/big.html")]
    assert "unsupported content type image/png" in reasons[server.url("/image.png")]
    assert "robots.txt" in reasons[server.url("/private/secret.html")]
    assert "redirect loop" in reasons[server.url("/loop-a")]
    assert "404" in reasons[server.url("/missing.html")]
    indexed = {item.source_uri for item in core.list_items()}
    assert {server.url(p) for p in ("/", "/ok.html", "/manual.pdf", "/notes.md")} <= indexed
    assert report.processed == len(indexed) == 4
    assert top_urls(core, "quokka")[0] == server.url("/ok.html")
    assert top_urls(core, "wombat")[0] == server.url("/notes.md")
    pdf = core.items_at(server.url("/manual.pdf"))[0]
    assert pdf.source_type == "pdf" and pdf.content.strip()


def test_ctrl_c_stops_a_crawl_with_what_was_committed(
    server: SiteServer, core: KnowledgeAgentCore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(web, "_GROUP_PAGES", 1)  # a commit per page
    site = make_doc_site(server, 40)
    seen: list[str] = []

    def press_ctrl_c_after_two_pages(event: CollectProgress) -> None:
        seen.append(event.status)
        if seen.count("processed") == 2:
            interrupts.interrupt_requested_event.set()  # what the Ctrl-C handler does

    try:
        with pytest.raises(CollectInterrupted) as caught:
            core.collect_knowledge(site.start_url, progress=press_ctrl_c_after_two_pages)
    finally:
        interrupts.interrupt_requested_event.clear()
    report = caught.value.report
    assert 2 <= report.processed < len(site.pages)
    assert core.storage.count_items() == report.processed  # exactly what was committed
    again = core.collect_knowledge(site.start_url)  # the next run completes the crawl
    assert again.unchanged == report.processed
    assert again.processed == len(site.within(3)) - report.processed


def test_odd_encodings_are_read_and_binary_pages_are_skipped(
    server: SiteServer, core: KnowledgeAgentCore
) -> None:
    pages = ["/latin.html", "/mislabelled.html", "/binary.html"]
    server.set_page("/", "".join(f'<a href="{page}">x</a>' for page in pages))
    server.set_page(
        "/latin.html",
        "<p>Le caf\u00e9 du march\u00e9 ouvre t\u00f4t.</p>".encode("latin-1"),
        content_type="text/html; charset=x-no-such-charset",
    )
    server.set_page(
        "/mislabelled.html",
        "<p>Die Stra\u00dfe ist gesperrt.</p>".encode("cp1252"),
        content_type="text/html; charset=utf-8",
    )
    server.set_page("/binary.html", bytes(range(256)) * 64, content_type="text/html")
    report = core.collect_knowledge(server.url("/"), crawl={"max_depth": 1})
    assert "café du marché" in core.items_at(server.url("/latin.html"))[0].content
    assert "Straße" in core.items_at(server.url("/mislabelled.html"))[0].content
    skipped = {issue.path: issue.reason for issue in report.skipped}
    assert "encoding" in skipped[server.url("/binary.html")]  # NUL bytes: not text
    assert report.processed == 3 and not report.failed


def test_a_sitemap_indexes_the_pages_it_lists(server: SiteServer, core: KnowledgeAgentCore) -> None:
    for name in ("a", "b", "c"):
        server.set_page(f"/{name}.html", f"<title>{name}</title><p>Page {name} of the atlas.</p>")
    server.set_sitemap("/sitemap.xml", [server.url("/a.html"), server.url("/b.html")])
    report = core.collect_knowledge(server.url("/sitemap.xml"))
    assert report.processed == 2
    assert {item.source_uri for item in core.list_items()} == {
        server.url("/a.html"),
        server.url("/b.html"),
    }


def test_a_changed_page_without_validators_is_compared_by_hash(
    server: SiteServer, core: KnowledgeAgentCore
) -> None:
    server.set_page("/", '<a href="/p.html">p</a>', conditional=False)
    server.set_page("/p.html", "<p>first version</p>", conditional=False)
    core.collect_knowledge(server.url("/"), crawl={"max_depth": 1})
    again = core.collect_knowledge(server.url("/"), crawl={"max_depth": 1})
    assert (again.processed, again.unchanged) == (0, 2)
    server.set_page("/p.html", "<p>second version</p>", conditional=False)
    third = core.collect_knowledge(server.url("/"), crawl={"max_depth": 1})
    assert (third.processed, third.unchanged) == (1, 1)
    assert "second" in core.items_at(server.url("/p.html"))[0].content


def test_sync_recrawls_only_due_sources_and_remove_forgets_a_source(
    server: SiteServer, core: KnowledgeAgentCore
) -> None:
    server.set_page("/a.html", "<p>alpha page</p>")
    server.set_page("/b.html", "<p>beta page</p>")
    core.collect_knowledge(server.url("/a.html"), crawl={"max_depth": 0}, refresh_interval=0)
    core.collect_knowledge(server.url("/b.html"), crawl={"max_depth": 0}, refresh_interval=3600)
    server.reset_hits()
    core.sync()
    assert server.hits("/a.html") == server.hits("/b.html") == 0  # neither is due yet
    core.sync(full=True)
    assert server.hits("/a.html") == server.hits("/b.html") == 1
    assert core.remove_source(server.url("/a.html")) == 1
    assert [s.url for s in core.doc_sources()] == [server.url("/b.html")]
    assert [item.source_uri for item in core.list_items()] == [server.url("/b.html")]
    with pytest.raises(NotFoundError):
        core.remove_source(server.url("/a.html"))


def test_a_url_policy_refuses_what_it_does_not_allow(
    server: SiteServer, core: KnowledgeAgentCore
) -> None:
    server.set_page("/a.html", "<p>alpha</p>")
    with pytest.raises(IngestError, match="private or reserved"):
        core.collect_knowledge(server.url("/a.html"), url_policy=UrlPolicy(("http://",)))
    with pytest.raises(IngestError, match="not under an allowed"):
        core.collect_knowledge(server.url("/a.html"), url_policy=UrlPolicy(("https://x.org/",)))
    named = UrlPolicy((server.url("/"),))
    assert core.collect_knowledge(server.url("/a.html"), url_policy=named).processed == 1


def test_bad_crawl_options_name_the_option(core: KnowledgeAgentCore) -> None:
    with pytest.raises(ConfigError, match="max_depth"):
        core.collect_knowledge("https://example.com/", crawl={"max_depth": -1})
    with pytest.raises(ConfigError, match="depth_max"):
        core.collect_knowledge("https://example.com/", crawl={"depth_max": 1})
    with pytest.raises(ConfigError, match="refresh_interval"):
        core.collect_knowledge(
            "https://example.com/", crawl=CrawlOptions(max_depth=0), refresh_interval=-1
        )


def test_the_command_line_adds_lists_and_removes_a_doc_source(
    server: SiteServer, tmp_path: Path
) -> None:
    site: DocSite = make_doc_site(server, 6)
    runner = CliRunner()
    base = ["--data-dir", str(tmp_path / "kb")]
    added = runner.invoke(
        cli, [*base, "add", site.start_url, "--depth", "1", "--name", "Docs", "--json"]
    )
    assert added.exit_code == 0, added.output
    assert json.loads(added.output)["processed"] == len(site.within(1))
    listed = runner.invoke(cli, [*base, "sources", "--json"])
    [source] = json.loads(listed.output)["doc_sources"]
    assert source["url"] == site.start_url and source["name"] == "Docs"
    assert source["options"]["max_depth"] == 1 and source["pages"] == len(site.within(1))
    table = runner.invoke(cli, [*base, "sources"])
    assert site.start_url in table.output and "Docs" in table.output
    removed = runner.invoke(cli, [*base, "remove", site.start_url])
    assert removed.exit_code == 0 and f"Removed {len(site.within(1))} items" in removed.output
    misuse = runner.invoke(cli, [*base, "add", str(tmp_path), "--depth", "1"])
    assert misuse.exit_code == 2 and "--depth apply only to a URL" in misuse.output


def test_a_recrawl_that_reached_nothing_keeps_its_last_crawl_time_and_says_why(
    server: SiteServer, core: KnowledgeAgentCore
) -> None:
    server.set_page("/docs/", "<title>Docs</title><p>The docs of the pelican.</p>")
    core.collect_knowledge(server.url("/docs/"), crawl={"max_depth": 0})
    [before] = core.doc_sources()
    server.set_error("/docs/", 503)
    report = core.collect_knowledge(server.url("/docs/"), crawl={"max_depth": 0})
    assert report.failed and not report.processed
    [source] = core.doc_sources()
    # Due when the last crawl that reached the site makes it, not a day after this one.
    assert source.crawled_at == before.crawled_at and "503" in source.last_error
    assert core.search("pelican")  # what was indexed stays
