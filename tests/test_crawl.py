"""The crawler against a real local web site (tests/web_site.py): modes, depth, scope,
every failure it must survive, robots.txt, conditional re-crawls, politeness, stopping
and the URL policy. Nothing leaves 127.0.0.1."""

from __future__ import annotations

import itertools
import logging
import socket
import threading
import time
from collections.abc import Callable

import httpx
import pytest
from crawling import Event, failures, pages, run
from web_site import SiteServer, make_doc_site

from knowledge_agent.crawl import (
    Crawler,
    CrawlFailure,
    CrawlOptions,
    CrawlPage,
    KnownPage,
    UrlPolicy,
    url_key,
)
from knowledge_agent.crawl.crawler import FRONTIER_FACTOR


def page_html(*hrefs: str, title: str = "page", text: str = "") -> str:
    links = "".join(f'<a href="{href}">{href}</a>\n' for href in hrefs)
    return f"<html><head><title>{title}</title></head><body><p>{text}</p>{links}</body></html>"


def closed_port() -> int:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = int(sock.getsockname()[1])
    sock.close()
    return port


# -- modes and depth ------------------------------------------------------------------


def test_site_crawl_gives_exactly_the_pages_within_depth_outside_the_exclude_glob(
    server: SiteServer,
) -> None:
    site = make_doc_site(server, 200)
    options = CrawlOptions(max_depth=3, exclude=("*/s3/*",))
    events, crawler = run(site.start_url, options)

    got = pages(events)
    expected = site.within(3) - site.under("/docs/s3/")
    assert set(got) == expected
    assert len(expected) == 125  # 1 + 5 + 25 + 125 pages to depth 3, less s3's 1 + 5 + 25
    for path, page in got.items():
        assert page.depth == site.pages[path].depth
        assert page.key == url_key(page.url) and page.status == 200
        assert page.content_type == "text/html" and page.charset == "utf-8"
        assert site.pages[path].words[0].encode() in page.body
    assert failures(events) == {}
    summary = crawler.summary
    assert summary.complete and summary.mode == "site"
    assert summary.pages == 125 and summary.failures == 0 and summary.skipped == 0
    assert summary.seen == {page.key for page in got.values()}
    assert summary.bytes >= sum(len(page.body) for page in got.values())
    # Fragment, tracking-parameter, trailing-slash and absolute variants: one request each.
    assert all(server.hits(path) == 1 for path in expected)
    assert not any(server.hits(path) for path in site.under("/docs/s3/"))
    assert not any(record.target.startswith("/docs/s3") for record in server.requests)


def test_the_start_page_is_depth_zero_and_depth_one_reaches_its_links(server: SiteServer) -> None:
    site = make_doc_site(server, 40)
    events, _ = run(site.start_url, CrawlOptions(max_depth=1))
    assert set(pages(events)) == site.within(1)
    assert pages(events)["/docs/"].depth == 0


def test_page_mode_fetches_the_one_page_and_reports_its_links(server: SiteServer) -> None:
    site = make_doc_site(server, 40)
    events, crawler = run(site.start_url, CrawlOptions(max_depth=0))
    assert list(pages(events)) == ["/docs/"]
    start = events[0]
    assert isinstance(start, CrawlPage)
    assert server.url("/docs/s1/") in start.links
    assert "https://example.com/elsewhere" in start.links
    assert not any(link.startswith("mailto:") for link in start.links)
    assert crawler.summary.mode == "page" and crawler.summary.complete
    assert server.hits("/docs/s1/") == 0


def test_sitemap_mode_fetches_listed_pages_in_scope_once_without_following_links(
    server: SiteServer,
) -> None:
    site = make_doc_site(server, 40)
    listed = [server.url(path) for path in sorted(site.at_depth(2))]
    listed += [
        listed[0] + "#again",
        listed[1] + "?utm_source=sitemap",
        "https://example.com/not-ours",
        server.url("/docs/s1/s6/"),  # listed, but excluded below
    ]
    server.set_sitemap("/sitemap.xml", listed)
    options = CrawlOptions(exclude=("*/s6/*",))
    events, crawler = run(server.url("/sitemap.xml"), options)

    expected = site.at_depth(2) - {"/docs/s1/s6/"}
    assert set(pages(events)) == expected
    assert all(page.depth == 0 for page in pages(events).values())
    assert all(server.hits(path) == 1 for path in expected)
    assert server.hits("/docs/") == 0  # pages' links are not followed
    assert crawler.summary.mode == "sitemap" and crawler.summary.complete
    listed_keys = {url_key(server.url(path)) for path in expected}
    assert crawler.summary.seen == listed_keys

    # Capped by max_pages: incomplete; the listed pages in scope count as seen up to the
    # frontier's bound (FRONTIER_FACTOR x max_pages), where reading the sitemap stopped.
    events, crawler = run(
        server.url("/sitemap.xml"), CrawlOptions(max_pages=3, exclude=("*/s6/*",))
    )
    assert len(pages(events)) == 3
    summary = crawler.summary
    assert not summary.complete
    assert summary.seen < listed_keys and len(summary.seen) == FRONTIER_FACTOR * 3
    assert summary.limits == ("a sitemap lists more URLs than the crawl keeps: read in part",)


def test_sitemap_index_with_gzip_and_nesting_up_to_three_levels(server: SiteServer) -> None:
    for name in "abcde":
        server.set_page(f"/{name}.html", page_html(title=name))
    server.set_sitemap("/maps/one.xml.gz", [server.url("/a.html")], gzipped=True)
    server.set_sitemap("/maps/two.xml", [server.url("/b.html"), "/c.html"], namespaced=False)
    server.set_sitemap("/maps/deep3.xml", [server.url("/d.html")])
    server.set_sitemap_index("/maps/deep2.xml", [server.url("/maps/deep3.xml")])
    server.set_sitemap_index("/maps/deep1.xml", [server.url("/maps/deep2.xml")])
    server.set_sitemap_index(
        "/sitemap_index.xml",
        [
            server.url("/maps/one.xml.gz"),
            server.url("/maps/two.xml"),
            server.url("/maps/deep1.xml"),
        ],
    )
    events, crawler = run(server.url("/sitemap_index.xml"))
    assert set(pages(events)) == {"/a.html", "/b.html", "/c.html", "/d.html"}
    assert crawler.summary.complete

    # One level deeper than allowed: the innermost sitemap is a skip, the crawl incomplete.
    server.set_sitemap_index("/maps/deep3.xml", [server.url("/maps/deep4.xml")])
    server.set_sitemap("/maps/deep4.xml", [server.url("/e.html")])
    events, crawler = run(server.url("/sitemap_index.xml"))
    assert "/e.html" not in pages(events)
    skip = failures(events)["/maps/deep4.xml"]
    assert skip.skipped and "nested deeper than 3" in skip.reason
    assert not crawler.summary.complete


def test_an_xml_answer_with_a_sitemap_root_makes_a_sitemap_crawl(server: SiteServer) -> None:
    server.set_page("/a.html", page_html("/b.html"))
    server.set_page("/b.html", page_html())
    server.set_sitemap("/feeds/site-map", [server.url("/a.html")])
    events, crawler = run(server.url("/feeds/site-map"))
    assert set(pages(events)) == {"/a.html"}
    assert crawler.summary.mode == "sitemap"


def test_a_failing_sitemap_makes_the_crawl_incomplete(server: SiteServer) -> None:
    server.set_page("/a.html", page_html())
    server.set_sitemap("/one.xml", [server.url("/a.html")])
    server.set_sitemap_index("/index.xml", [server.url("/one.xml"), server.url("/missing.xml")])
    events, crawler = run(server.url("/index.xml"))
    assert set(pages(events)) == {"/a.html"}
    assert failures(events)["/missing.xml"].reason == "HTTP 404"
    assert not crawler.summary.complete


# -- scope ----------------------------------------------------------------------------


def test_include_globs_and_same_origin(server: SiteServer) -> None:
    with SiteServer() as other:
        other.set_page("/x.html", page_html())
        server.set_page(
            "/",
            page_html("/guide/a.html", "/guide/b.html", "/blog/post.html", other.url("/x.html")),
        )
        for path in ("/guide/a.html", "/guide/b.html", "/blog/post.html"):
            server.set_page(path, page_html())
        options = CrawlOptions(include=(server.url("/guide/*"),))
        events, _ = run(server.url("/"), options)
        assert set(pages(events)) == {"/", "/guide/a.html", "/guide/b.html"}
        assert other.hits("/x.html") == 0

        events, _ = run(server.url("/"), CrawlOptions(same_origin=False, max_depth=1))
        assert other.hits("/x.html") == 1
        assert "/x.html" in pages(events)


def test_a_start_url_redirected_to_another_origin_crawls_that_origin(server: SiteServer) -> None:
    with SiteServer() as moved:
        moved.set_page("/docs/", page_html("intro.html"))
        moved.set_page("/docs/intro.html", page_html("/docs/", server.url("/old.html")))
        server.redirect("/docs/", moved.url("/docs/"))
        server.set_page("/old.html", page_html())
        events, crawler = run(server.url("/docs/"))
        # Both origins are in scope: the one asked for and the one it landed on.
        assert [e.url for e in events if isinstance(e, CrawlPage)] == [
            moved.url("/docs/"),
            moved.url("/docs/intro.html"),
            server.url("/old.html"),
        ]
        start = events[0]
        assert isinstance(start, CrawlPage) and start.requested_url == server.url("/docs/")
        assert crawler.summary.complete


def test_a_link_redirected_out_of_scope_is_skipped(server: SiteServer) -> None:
    with SiteServer() as other:
        other.set_page("/landing.html", page_html())
        server.set_page("/", page_html("/go.html"))
        server.redirect("/go.html", other.url("/landing.html"))
        events, _ = run(server.url("/"))
        skip = failures(events)["/go.html"]
        assert skip.skipped
        assert (
            skip.reason
            == f"outside the crawl's scope (after a redirect to {other.url('/landing.html')})"
        )
        assert other.hits("/landing.html") == 0


def test_max_pages_caps_the_crawl_and_seen_keeps_the_pages_not_reached(server: SiteServer) -> None:
    site = make_doc_site(server, 60)
    events, crawler = run(site.start_url, CrawlOptions(max_pages=10, max_depth=5))
    assert len(pages(events)) == 10
    summary = crawler.summary
    assert not summary.complete and summary.pages == 10
    fetched = {page.key for page in pages(events).values()}
    assert fetched < summary.seen  # discovered in-scope pages count as seen
    assert summary.seen <= {url_key(page.url) for page in site.pages.values()}


def test_the_frontier_holds_at_most_a_few_times_max_pages(server: SiteServer) -> None:
    paths = [f"/p{n}.html" for n in range(50)]
    server.set_page("/", page_html(*paths))
    for path in paths:
        server.set_page(path, page_html())
    events, crawler = run(server.url("/"), CrawlOptions(max_pages=2))
    assert len(pages(events)) == 2
    summary = crawler.summary
    assert len(summary.seen) == FRONTIER_FACTOR * 2
    assert summary.limits == (
        f"more than {FRONTIER_FACTOR * 2} URLs found ({FRONTIER_FACTOR} × max_pages): "
        "the rest were not queued",
    )
    assert not summary.complete


# -- every way a URL can fail ---------------------------------------------------------


def test_every_bad_page_is_a_failure_with_its_reason_and_the_rest_is_crawled(
    server: SiteServer,
) -> None:
    bad = [
        "/missing.html", "/gone.html", "/error.html", "/unavailable.html", "/slow.html",
        "/image.png", "/huge.png", "/big.txt", "/endless.txt", "/loop-a", "/hop1", "/raw",
        "/no-location",
    ]  # fmt: skip
    good = ["/ok.html", "/no-type", "/readme.md", "/manual.pdf", "/notes.txt", "/x.xhtml"]
    server.set_page("/", page_html(*bad, *good))
    server.set_page("/ok.html", page_html("/deeper.html"))
    server.set_page("/deeper.html", page_html())
    server.set_page("/gone.html", "gone", status=410)
    server.set_error("/error.html", 500)
    server.set_error("/unavailable.html", 503)
    server.set_slow("/slow.html", 20.0)
    server.set_png("/image.png")
    server.set_big("/huge.png", 200_000_000, content_type="image/png", content_length=False)
    server.set_big("/big.txt", 1_000_000)
    server.set_big("/endless.txt", 200_000_000, content_length=False)
    server.redirect("/loop-a", "/loop-b")
    server.redirect("/loop-b", "/loop-a")
    for number in range(1, 6):
        server.redirect(f"/hop{number}", f"/hop{number + 1}", status=302)
    server.set_raw("/raw", b"this is not HTTP at all\r\n\r\n")
    server.set_page("/no-location", "", status=302, content_type=None)
    server.set_page(
        "/no-type", "<!DOCTYPE html><html><body><p>sniffed</p></body></html>", content_type=None
    )
    server.set_page(
        "/readme.md", "# Read me\n\nMarkdown served as text.", content_type="text/plain"
    )
    pdf = server.set_pdf("/manual.pdf", content_type=None)
    server.set_page("/notes.txt", "plain notes", content_type="text/plain; charset=utf-8")
    server.set_page("/x.xhtml", page_html(), content_type="application/xhtml+xml")

    # A deadline a loaded machine still meets for every page that answers at once.
    options = CrawlOptions(timeout=3.0, max_page_bytes=100_000, max_redirects=3)
    started = time.monotonic()
    events, crawler = run(server.url("/"), options)
    assert time.monotonic() - started < 60  # a hang guard, not a timing

    got = failures(events)
    assert set(got) == set(bad)
    expect = {
        "/missing.html": ("HTTP 404", False, 404, True),
        "/gone.html": ("HTTP 410", False, 410, True),
        "/error.html": ("HTTP 500", False, 500, False),
        "/unavailable.html": ("HTTP 503", False, 503, False),
        "/slow.html": ("timed out after 3.0 s", False, None, False),
        "/image.png": ("unsupported content type image/png", True, 200, False),
        "/huge.png": ("unsupported content type image/png", True, 200, False),
        "/big.txt": ("larger than 100,000 bytes", True, 200, False),
        "/endless.txt": ("larger than 100,000 bytes", True, 200, False),
        "/loop-a": ("redirect loop", False, 301, False),
        "/hop1": ("too many redirects (3)", False, 302, False),
        "/no-location": ("HTTP 302 without a Location header", False, 302, False),
    }
    for path, (reason, skipped, status, gone) in expect.items():
        failure = got[path]
        assert (failure.reason, failure.skipped, failure.status, failure.gone) == (
            reason,
            skipped,
            status,
            gone,
        ), path
        assert failure.depth == 1 and failure.url == server.url(path)
    assert got["/raw"].reason.startswith("invalid response") and not got["/raw"].skipped

    ok = pages(events)
    assert set(ok) == {"/", "/deeper.html", *good}
    assert ok["/deeper.html"].depth == 2
    assert ok["/no-type"].content_type == "text/html"
    assert ok["/readme.md"].content_type == "text/markdown"
    assert ok["/manual.pdf"].content_type == "application/pdf" and ok["/manual.pdf"].body == pdf
    assert ok["/notes.txt"].content_type == "text/plain" and ok["/notes.txt"].links == ()
    assert ok["/x.xhtml"].content_type == "application/xhtml+xml"
    summary = crawler.summary
    assert summary.complete
    assert (summary.failures, summary.skipped) == (9, 4)
    assert summary.bytes < 1_000_000  # no big body was downloaded, nor the huge image


def test_an_unreachable_server_is_a_failure_not_an_exception() -> None:
    port = closed_port()
    events, crawler = run(f"http://127.0.0.1:{port}/docs/")
    assert len(events) == 1 and isinstance(events[0], CrawlFailure)
    assert events[0].reason == "connection refused" and not events[0].skipped
    assert not crawler.summary.complete and crawler.summary.failures == 1


def test_tls_to_a_plain_http_server_is_a_tls_failure(server: SiteServer) -> None:
    events, _ = run(f"https://127.0.0.1:{server.port}/", CrawlOptions(timeout=2))
    assert len(events) == 1 and isinstance(events[0], CrawlFailure)
    assert events[0].reason.startswith("TLS error"), events[0].reason


def test_a_name_that_does_not_resolve_is_a_not_found_failure() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        cause = socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        raise httpx.ConnectError("[Errno -2] Name or service not known", request=request) from cause

    events, _ = run("https://docs.nowhere.invalid/", transport=httpx.MockTransport(handler))
    assert [(e.reason, e.skipped) for e in events if isinstance(e, CrawlFailure)] == [
        ("not found: name does not resolve", False)
    ]


def test_follow_redirects_off_makes_a_redirect_a_failure_naming_its_target(
    server: SiteServer,
) -> None:
    server.set_page("/", page_html("/old.html"))
    server.redirect("/old.html", "/new.html")
    server.set_page("/new.html", page_html())
    events, _ = run(server.url("/"), CrawlOptions(follow_redirects=False))
    failure = failures(events)["/old.html"]
    assert failure.reason == f"redirected to {server.url('/new.html')}"
    assert failure.status == 301 and failure.skipped
    assert server.hits("/new.html") == 0


# -- robots.txt -----------------------------------------------------------------------


def test_robots_txt_disallow_is_a_skip_and_can_be_ignored(server: SiteServer) -> None:
    server.set_robots("User-agent: *\nDisallow: /private/\n")
    server.set_page("/", page_html("/public.html", "/private/secret.html"))
    server.set_page("/public.html", page_html())
    server.set_page("/private/secret.html", page_html())
    events, _ = run(server.url("/"), CrawlOptions(concurrency=3))
    skip = failures(events)["/private/secret.html"]
    assert skip.reason == "disallowed by robots.txt" and skip.skipped
    assert server.hits("/private/secret.html") == 0
    assert server.hits("/robots.txt") == 1
    assert set(pages(events)) == {"/", "/public.html"}

    server.reset_hits()
    events, _ = run(server.url("/"), CrawlOptions(respect_robots=False))
    assert "/private/secret.html" in pages(events)
    assert server.hits("/robots.txt") == 0


def test_an_erroring_robots_txt_allows_all_with_a_warning(
    server: SiteServer, caplog: pytest.LogCaptureFixture
) -> None:
    server.set_error("/robots.txt", 500)
    server.set_page("/", page_html("/a.html"))
    server.set_page("/a.html", page_html())
    with caplog.at_level(logging.WARNING, logger="knowledge_agent.crawl"):
        events, _ = run(server.url("/"))
    assert set(pages(events)) == {"/", "/a.html"}
    assert any("robots.txt" in record.getMessage() for record in caplog.records)


def test_robots_crawl_delay_is_a_minimum_delay(server: SiteServer) -> None:
    server.set_robots("User-agent: *\nCrawl-delay: 1\n")
    server.set_page("/", page_html("/a.html"))
    server.set_page("/a.html", page_html())
    run(server.url("/"))
    starts = [record.started for record in server.requests]
    assert len(starts) == 3  # robots.txt, /, /a.html
    assert starts[2] - starts[1] >= 0.9


# -- conditional re-crawls ------------------------------------------------------------


def remembered(events: list[Event]) -> dict[str, KnownPage]:
    return {
        e.key: KnownPage(e.url, e.etag, e.last_modified, e.content_hash, e.links)
        for e in events
        if isinstance(e, CrawlPage)
    }


def test_a_recrawl_confirms_unchanged_pages_and_finds_changed_gone_and_new_ones(
    server: SiteServer,
) -> None:
    site = make_doc_site(server, 31)  # depths 0..2
    first, _ = run(site.start_url)
    assert len(pages(first)) == 31
    known = remembered(first)

    changed, vanished = "/docs/s2/", "/docs/s1/s7/"
    server.set_page(changed, page_html("fresh.html", "/docs/", title="changed", text="new words"))
    server.set_page("/docs/s2/fresh.html", page_html(title="fresh"))
    server.remove(vanished)
    server.reset_hits()

    second, crawler = run(site.start_url, known=known)
    got = pages(second)
    assert got[changed].status == 200 and not got[changed].unchanged
    assert b"new words" in got[changed].body
    assert "/docs/s2/fresh.html" in got and not got["/docs/s2/fresh.html"].unchanged
    gone = failures(second)[vanished]
    assert gone.gone and gone.reason == "HTTP 404"
    unchanged = {path for path, page in got.items() if page.unchanged}
    # s2's old children are no longer linked: they were not requested again.
    expected_unchanged = set(site.pages) - {changed, vanished} - site.under("/docs/s2/")
    assert unchanged == expected_unchanged
    for path in unchanged:
        page = got[path]
        assert page.status == 304 and page.body == b""
        assert page.content_hash == known[page.key].content_hash
        assert page.links == known[page.key].links
    assert len(server.statuses(304)) == len(expected_unchanged)
    assert all("if-none-match" in r.headers for r in server.requests if r.status == 304)
    summary = crawler.summary
    assert summary.complete and summary.unchanged == len(expected_unchanged)
    assert url_key(server.url(vanished)) in summary.seen


def test_without_validators_an_unchanged_body_is_recognised_by_its_hash(
    server: SiteServer,
) -> None:
    site = make_doc_site(server, 6, conditional=False)
    first, _ = run(site.start_url)
    known = remembered(first)
    server.set_page("/docs/s3/", page_html(title="edited"), conditional=False)
    second, crawler = run(site.start_url, known=known)
    got = pages(second)
    assert server.statuses(304) == []
    assert {path for path, page in got.items() if page.unchanged} == set(site.pages) - {"/docs/s3/"}
    assert all(page.status == 200 and page.body for page in got.values())
    assert not got["/docs/s3/"].unchanged
    assert crawler.summary.unchanged == 5


def test_a_known_page_that_errors_still_leads_to_its_remembered_links(server: SiteServer) -> None:
    site = make_doc_site(server, 31)
    known = remembered(run(site.start_url)[0])
    server.set_error("/docs/s1/", 503)
    events, _ = run(site.start_url, known=known)
    assert failures(events)["/docs/s1/"].reason == "HTTP 503"
    assert site.under("/docs/s1/") - {"/docs/s1/"} <= set(pages(events))


# -- politeness -----------------------------------------------------------------------


def test_no_more_requests_in_flight_than_the_concurrency(server: SiteServer) -> None:
    paths = [f"/p{number}.html" for number in range(16)]
    server.set_page("/", page_html(*paths))
    for path in paths:
        server.set_page(path, page_html(), delay=0.1)
    events, _ = run(server.url("/"), CrawlOptions(concurrency=3))
    assert len(pages(events)) == 17
    assert server.max_in_flight == 3


def test_delay_spaces_request_starts_to_one_host(server: SiteServer) -> None:
    paths = [f"/p{number}.html" for number in range(4)]
    server.set_page("/", page_html(*paths))
    for path in paths:
        server.set_page(path, page_html())
    run(server.url("/"), CrawlOptions(delay=0.2, concurrency=4))
    starts = sorted(record.started for record in server.requests)
    assert len(starts) == 6  # robots.txt, the start page, four links
    # Arrival times jitter a little around the send times the throttle spaces out.
    gaps = [later - earlier for earlier, later in itertools.pairwise(starts)]
    assert min(gaps) >= 0.15, gaps
    assert starts[-1] - starts[0] >= 5 * 0.2 - 0.05


def test_user_agent_and_extra_headers_go_with_every_request(server: SiteServer) -> None:
    server.set_page("/", page_html("/a.html"))
    server.set_page("/a.html", page_html())
    options = CrawlOptions(user_agent="docs-bot/9", headers={"Authorization": "Bearer t0k"})
    run(server.url("/"), options)
    assert len(server.requests) == 3
    for record in server.requests:
        assert record.headers["user-agent"] == "docs-bot/9"
        assert record.headers["authorization"] == "Bearer t0k"


# -- stopping -------------------------------------------------------------------------


GUARD_S = 60.0  # hang guard: a stop that works ends in well under a second


def slow_site(server: SiteServer) -> str:
    """A site whose /slow.html answers only when the server closes (or after an hour): a
    crawl that waited for it would outlive every guard here."""
    server.set_page("/", page_html("/fast.html", "/slow.html"))
    server.set_page("/fast.html", page_html())
    server.set_slow("/slow.html", 3600.0)
    return server.url("/")


def wait_for_hit(server: SiteServer, path: str) -> None:
    deadline = time.monotonic() + GUARD_S
    while not server.hits(path):
        assert time.monotonic() < deadline, f"{path} was never requested"
        time.sleep(0.01)


def within_guard(body: Callable[[], None], what: str) -> None:
    """Run ``body`` in a thread; fail saying ``what`` did not happen if it is still running
    after the hang guard (the request it must not wait for lasts an hour)."""
    raised: list[BaseException] = []

    def guarded() -> None:
        try:
            body()
        except BaseException as exc:
            raised.append(exc)

    thread = threading.Thread(target=guarded, daemon=True)
    thread.start()
    thread.join(GUARD_S)
    assert not thread.is_alive(), f"{what}: still waiting for the hung request"
    if raised:
        raise raised[0]


def unanswered(server: SiteServer, path: str) -> bool:
    """Whether every request for ``path`` is still waiting for its answer."""
    return all(r.status is None for r in server.requests if r.path == path)


def test_stop_ends_the_iteration_while_a_request_hangs(server: SiteServer) -> None:
    start = slow_site(server)
    crawler = Crawler(start, CrawlOptions(timeout=3600))
    events: list[Event] = []
    fast_page = threading.Event()

    def crawl() -> None:
        with crawler:
            stopper = threading.Thread(target=stop_when_requested, daemon=True)
            stopper.start()
            for event in crawler:
                events.append(event)
                if isinstance(event, CrawlPage) and event.url.endswith("/fast.html"):
                    fast_page.set()

    def stop_when_requested() -> None:
        # Once the slow page hangs and the fast one is through, whichever finished first.
        wait_for_hit(server, "/slow.html")
        fast_page.wait(GUARD_S)
        crawler.stop()

    within_guard(crawl, "stop() did not end the crawl")
    assert unanswered(server, "/slow.html")  # it ended without the hung answer
    assert set(pages(events)) == {"/", "/fast.html"}
    summary = crawler.summary
    assert not summary.complete
    assert url_key(server.url("/slow.html")) in summary.seen


def test_leaving_the_with_block_mid_crawl_does_not_wait_for_a_hung_request(
    server: SiteServer,
) -> None:
    start = slow_site(server)
    crawler = Crawler(start, CrawlOptions(timeout=3600))

    def leave_early() -> None:
        with crawler:
            for event in crawler:
                if isinstance(event, CrawlPage) and event.url.endswith("/fast.html"):
                    wait_for_hit(server, "/slow.html")
                    break

    within_guard(leave_early, "leaving the with block did not return")
    assert unanswered(server, "/slow.html")
    assert not crawler.summary.complete


def test_ctrl_c_in_the_consumer_ends_the_crawl_without_waiting(server: SiteServer) -> None:
    start = slow_site(server)
    crawler = Crawler(start, CrawlOptions(timeout=3600))

    def interrupted() -> None:
        with pytest.raises(KeyboardInterrupt), crawler:
            for event in crawler:
                if isinstance(event, CrawlPage) and event.url.endswith("/fast.html"):
                    wait_for_hit(server, "/slow.html")
                    raise KeyboardInterrupt

    within_guard(interrupted, "Ctrl-C did not end the crawl")
    assert unanswered(server, "/slow.html")
    assert not crawler.summary.complete


def test_a_crawler_runs_once(server: SiteServer) -> None:
    server.set_page("/", page_html())
    with Crawler(server.url("/")) as crawler:
        list(crawler)
        with pytest.raises(RuntimeError):
            iter(crawler)


# -- the URL policy -------------------------------------------------------------------


def test_a_policy_naming_the_local_server_allows_it_and_refuses_a_redirect_to_metadata(
    server: SiteServer,
) -> None:
    server.set_page("/", page_html("/a.html", "/meta"))
    server.set_page("/a.html", page_html())
    server.redirect("/meta", "http://169.254.169.254/latest/meta-data/")
    rules = UrlPolicy(allowed_prefixes=(server.url("/"),))
    events, _ = run(server.url("/"), CrawlOptions(same_origin=False), policy=rules)
    assert set(pages(events)) == {"/", "/a.html"}
    refused = failures(events)["/meta"]
    assert refused.skipped and refused.reason.startswith("refused by URL policy")
    assert "169.254.169.254" in refused.reason


def test_a_policy_that_does_not_name_localhost_refuses_it_before_any_request(
    server: SiteServer,
) -> None:
    server.set_page("/", page_html())
    events, crawler = run(server.url("/"), policy=UrlPolicy(allowed_prefixes=("http://",)))
    assert len(events) == 1 and isinstance(events[0], CrawlFailure)
    assert events[0].skipped and "private or reserved" in events[0].reason
    assert server.requests == []
    assert not crawler.summary.complete


def test_the_policy_guards_the_connection_against_dns_rebinding(server: SiteServer) -> None:
    server.set_page("/page.html", page_html())
    answers = iter([["93.184.215.14"], ["127.0.0.1"]] * 4)

    def rebinding(host: str) -> list[str]:
        assert host == "rebind.example.com"
        return next(answers)  # public for the check, loopback for the connection

    rules = UrlPolicy(allowed_prefixes=("http://",), resolver=rebinding)
    start = f"http://rebind.example.com:{server.port}/page.html"
    events, _ = run(start, CrawlOptions(respect_robots=False), policy=rules)
    assert len(events) == 1 and isinstance(events[0], CrawlFailure)
    assert events[0].skipped and "127.0.0.1" in events[0].reason
    assert server.requests == []
