"""The crawler against a hostile site (tests/hostile_server.py): deadlines per request and
per crawl, bounded sitemaps, decompression bombs, hostile XML, redirects that try to leave
the URL policy, and a user's crawl that must not be steered to private addresses. Every
server is on 127.0.0.1; assertions are on what was fetched, said and counted, not on time.
"""

from __future__ import annotations

import contextlib
import gzip
import socket
import threading
import zlib
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from crawling import failures, pages, run
from hostile_server import HostileServer

from knowledge_agent import KnowledgeAgentCore
from knowledge_agent.cli_crawl import crawl_options_from
from knowledge_agent.crawl import (
    CrawlFailure,
    CrawlOptions,
    CrawlPage,
    KnownPage,
    UrlPolicy,
)
from knowledge_agent.crawl import crawler as crawler_module
from knowledge_agent.crawl.crawler import FRONTIER_FACTOR
from knowledge_agent.crawl.decode import STEP
from knowledge_agent.crawl.fetch import Fetcher, Response, Throttle
from knowledge_agent.crawl.sitemap import MAX_SITEMAPS
from knowledge_agent.crawl.transport import make_client
from knowledge_agent.errors import IngestError

QUICK = {"respect_robots": False, "timeout": 0.5}


@pytest.fixture
def hostile() -> Iterator[HostileServer]:
    with HostileServer() as site:
        yield site


@pytest.fixture
def other() -> Iterator[HostileServer]:
    """A second server, on another port: where a hostile redirect would like to go."""
    with HostileServer() as site:
        yield site


def links(*hrefs: str) -> str:
    return "<html><body>" + "".join(f'<a href="{h}">{h}</a>' for h in hrefs) + "</body></html>"


@contextlib.contextmanager
def fetcher(options: CrawlOptions, policy: UrlPolicy) -> Iterator[Fetcher]:
    """A Fetcher as the crawler builds one, on a client closed after."""
    client = make_client(options, policy=policy, transport=None)
    try:
        yield Fetcher(
            client,
            timeout=options.timeout,
            follow_redirects=True,
            max_redirects=options.max_redirects,
            throttle=Throttle(0),
            stop=threading.Event(),
        )
    finally:
        client.close()


def allow(_url: str, _hop: int) -> None:
    return None


# -- deadlines ------------------------------------------------------------------------


def test_a_dribbling_page_fails_at_its_deadline_in_the_read_loop(hostile: HostileServer) -> None:
    # One byte every 0.05 s never trips a 0.5 s read timeout: only the total deadline ends it.
    hostile.dribble("/slow.html", size=1000, interval=0.05)
    with fetcher(CrawlOptions(timeout=0.5), UrlPolicy.for_user(hostile.url())) as get:
        answer = get.get(hostile.url("/slow.html"), check=allow, accept=None, max_bytes=10_000)
    assert isinstance(answer, CrawlFailure)
    assert answer.reason == "timed out after 0.5 s" and not answer.skipped
    assert 0 < hostile.sent("/slow.html") < 1000


def test_a_dribbling_page_times_out_in_a_crawl_and_the_rest_is_crawled(
    hostile: HostileServer,
) -> None:
    hostile.page("/", links("/slow.html", "/fine.html"))
    hostile.page("/fine.html", links())
    hostile.dribble("/slow.html", size=1000, interval=0.05)
    events, crawler = run(hostile.url("/"), CrawlOptions(**QUICK))
    assert set(pages(events)) == {"/", "/fine.html"}
    assert failures(events)["/slow.html"].reason == "timed out after 0.5 s"
    assert crawler.summary.failures == 1


def test_the_consumer_fails_a_request_whose_worker_is_blocked_in_one_read() -> None:
    # A transport that blocks and ignores every timeout: only the consumer's watchdog can
    # end this request, and it must do so while the worker is still blocked.
    entered, release = threading.Event(), threading.Event()

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/":
            return httpx.Response(200, html=links("/blocked.html"))
        entered.set()
        release.wait(60)
        return httpx.Response(200, html=links())

    try:
        events, crawler = run(
            "https://docs.example.com/",
            CrawlOptions(**QUICK),
            transport=httpx.MockTransport(handler),
        )
        still_blocked = entered.is_set() and not release.is_set()
    finally:
        release.set()
    assert still_blocked
    assert set(pages(events)) == {"/"}
    assert failures(events)["/blocked.html"].reason == "timed out after 0.5 s"
    assert "https://docs.example.com/blocked.html" in crawler.summary.seen  # kept, not gone


def test_waiting_for_the_throttle_is_not_request_time(hostile: HostileServer) -> None:
    # Requests to one host start 0.6 s apart: the later ones wait longer than the 0.5 s
    # deadline before they start, and none of them times out for it.
    hostile.page("/", links("/a.html", "/b.html", "/c.html"))
    for name in "abc":
        hostile.page(f"/{name}.html", links())
    options = CrawlOptions(delay=0.6, concurrency=4, **QUICK)
    events, crawler = run(hostile.url("/"), options)
    assert set(pages(events)) == {"/", "/a.html", "/b.html", "/c.html"}
    assert crawler.summary.failures == 0


def test_a_robots_txt_that_times_out_costs_its_own_deadline_not_the_page(
    hostile: HostileServer,
) -> None:
    hostile.stall("/robots.txt", 30)
    hostile.page("/", links())
    events, _ = run(hostile.url("/"), CrawlOptions(max_depth=0, timeout=0.5))
    assert set(pages(events)) == {"/"}  # robots.txt unreadable: everything is allowed
    assert hostile.hits("/robots.txt") == 1


def test_max_time_stops_the_crawl_abandons_a_blocked_worker_and_leaves_it_incomplete(
    hostile: HostileServer,
) -> None:
    hostile.page("/", links("/stuck.html"))
    hostile.stall("/stuck.html", 30)
    options = CrawlOptions(respect_robots=False, timeout=30, max_time=0.5)
    events, crawler = run(hostile.url("/"), options)
    assert hostile.active("/stuck.html") == 1  # the crawl returned while it was blocked
    assert set(pages(events)) == {"/"}
    summary = crawler.summary
    assert summary.limits == ("crawl stopped after 0.5 s (max_time)",)
    assert not summary.complete


def test_max_time_stops_a_crawl_of_many_slow_pages(hostile: HostileServer) -> None:
    paths = [f"/slow/{n}.html" for n in range(40)]
    hostile.page("/", links(*paths))
    for path in paths:
        hostile.dribble(path, size=1000, interval=0.05)
    options = CrawlOptions(concurrency=2, max_time=1.0, **QUICK)
    events, crawler = run(hostile.url("/"), options)
    timed_out = [e for e in events if isinstance(e, CrawlFailure)]
    assert timed_out and all(e.reason == "timed out after 0.5 s" for e in timed_out)
    assert sum(hostile.hits(path) for path in paths) < len(paths)
    assert crawler.summary.limits == ("crawl stopped after 1.0 s (max_time)",)
    assert not crawler.summary.complete


def test_a_crawl_stopped_by_max_time_says_so_and_removes_nothing(
    hostile: HostileServer, tmp_path: Path
) -> None:
    hostile.page("/", links("/a.html", "/b.html"))
    hostile.page("/a.html", "<html><body><p>alpha page words</p></body></html>")
    hostile.page("/b.html", "<html><body><p>bravo page words</p></body></html>")
    with KnowledgeAgentCore(tmp_path / "kb", workers=1) as core:
        first = core.collect_knowledge(hostile.url("/"), crawl=QUICK)
        assert (first.processed, first.stopped_by) == (3, [])
        hostile.stall("/b.html", 30)
        crawl = {"respect_robots": False, "timeout": 30, "max_time": 0.5}
        again = core.collect_knowledge(hostile.url("/"), crawl=crawl, full=True)
        assert again.stopped_by == ["crawl stopped after 0.5 s (max_time)"]
        assert again.to_dict()["stopped_by"] == again.stopped_by
        assert again.removed == 0
        assert core.search("bravo", mode="keyword")  # not seen this time, still kept


# -- sitemaps -------------------------------------------------------------------------


@pytest.mark.parametrize("gzipped", [False, True])
def test_a_million_url_sitemap_is_read_only_until_the_frontier_is_full(
    hostile: HostileServer, gzipped: bool
) -> None:
    path = "/sitemap.xml.gz" if gzipped else "/sitemap.xml"
    hostile.huge_sitemap(path, 1_000_000, gzipped=gzipped)
    events, crawler = run(hostile.url(path), CrawlOptions(max_pages=5, **QUICK))
    assert len(pages(events)) == 5 and not failures(events)
    summary = crawler.summary
    assert len(summary.seen) == FRONTIER_FACTOR * 5
    assert summary.limits == ("a sitemap lists more URLs than the crawl keeps: read in part",)
    assert not summary.complete
    # The whole document is about 60 MB: reading stopped near its start (what the server
    # wrote is bounded by the socket buffers, not by the sitemap).
    assert hostile.sent(path) < 20 * 1024 * 1024


def test_an_index_of_three_huge_sitemaps_is_bounded_too(hostile: HostileServer) -> None:
    maps = [f"/maps/{n}.xml" for n in range(3)]
    for path in maps:
        hostile.huge_sitemap(path, 1_000_000)
    hostile.sitemap_index("/index.xml", [hostile.url(path) for path in maps])
    events, crawler = run(hostile.url("/index.xml"), CrawlOptions(max_pages=5, **QUICK))
    assert len(pages(events)) == 5
    assert all(hostile.hits(path) <= 1 for path in maps)
    summary = crawler.summary
    assert len(summary.seen) == FRONTIER_FACTOR * 5
    assert not summary.complete and summary.limits


def test_sitemaps_fetched_per_crawl_are_capped(hostile: HostileServer) -> None:
    maps = [f"/maps/{n}.xml" for n in range(MAX_SITEMAPS + 10)]
    hostile.sitemap_index("/index.xml", [hostile.url(path) for path in maps])
    for path in maps:
        hostile.sitemap_index(path, [])  # empty: only the fetches count
    _, crawler = run(hostile.url("/index.xml"), CrawlOptions(**QUICK))
    fetched = sum(hostile.hits(path) for path in maps)
    assert fetched == MAX_SITEMAPS - 1  # the index itself is the first
    assert f"more than {MAX_SITEMAPS} sitemaps: the rest were not read" in crawler.summary.limits
    assert not crawler.summary.complete


@pytest.mark.parametrize("content_encoding", [False, True])
def test_a_gzip_bomb_sitemap_is_cut_at_its_decoded_limit(
    hostile: HostileServer, monkeypatch: pytest.MonkeyPatch, content_encoding: bool
) -> None:
    # The cap made small, so the test does not parse 50 MB of spaces.
    monkeypatch.setattr(crawler_module, "MAX_SITEMAP_BYTES", 2_000_000)
    hostile.gzip_bomb("/sitemap.xml.gz", 20, content_encoding=content_encoding, prefix=b"<urlset>")
    events, crawler = run(hostile.url("/sitemap.xml.gz"), CrawlOptions(**QUICK))
    (failure,) = events
    assert isinstance(failure, CrawlFailure)
    assert failure.reason.startswith("not a sitemap: " if not content_encoding else "larger")
    assert "larger than 2,000,000 bytes" in failure.reason
    assert not crawler.summary.complete


@pytest.mark.parametrize("big_endian", [False, True])
def test_a_utf16_sitemap_is_read_and_its_entities_are_refused(
    hostile: HostileServer, big_endian: bool
) -> None:
    hostile.utf16_sitemap("/plain.xml", [hostile.url("/page/1.html")], big_endian=big_endian)
    events, _ = run(hostile.url("/plain.xml"), CrawlOptions(**QUICK))
    assert set(pages(events)) == {"/page/1.html"}

    hostile.utf16_sitemap(
        "/laughs.xml", [hostile.url("/page/2.html")], big_endian=big_endian, laughs=True
    )
    events, crawler = run(hostile.url("/laughs.xml"), CrawlOptions(**QUICK))
    assert [(e.reason, e.skipped) for e in events if isinstance(e, CrawlFailure)] == [
        ("not a sitemap: sitemap declares XML entities", False)
    ]
    assert hostile.hits("/page/2.html") == 0
    assert not crawler.summary.complete


def test_a_utf16_start_page_with_entities_is_refused_too(hostile: HostileServer) -> None:
    # No .xml suffix: the start URL turns out to be a sitemap by its type.
    hostile.utf16_sitemap("/feeds/map", [hostile.url("/page/1.html")], laughs=True)
    events, _ = run(hostile.url("/feeds/map"), CrawlOptions(**QUICK))
    assert [e.reason for e in events if isinstance(e, CrawlFailure)] == [
        "not a sitemap: sitemap declares XML entities"
    ]
    assert hostile.hits("/page/1.html") == 0


# -- Content-Encoding -----------------------------------------------------------------


def test_a_gzip_bomb_page_decodes_no_more_than_the_page_limit(hostile: HostileServer) -> None:
    size = hostile.gzip_bomb("/bomb.html", 64)
    assert size < 100_000  # 64 MB once decoded
    with fetcher(CrawlOptions(timeout=5), UrlPolicy.for_user(hostile.url())) as get:
        answer = get.get(hostile.url("/bomb.html"), check=allow, accept=None, max_bytes=1_000_000)
    assert isinstance(answer, CrawlFailure) and answer.skipped
    assert answer.reason == "larger than 1,000,000 bytes"
    assert 1_000_000 < get.bytes_decoded <= 1_000_000 + STEP
    assert get.bytes_read <= size


def test_a_gzip_bomb_page_is_a_skip_in_a_crawl(hostile: HostileServer) -> None:
    hostile.page("/", links("/bomb.html"))
    hostile.gzip_bomb("/bomb.html", 64)
    options = CrawlOptions(max_page_bytes=1_000_000, **QUICK)
    events, crawler = run(hostile.url("/"), options)
    skip = failures(events)["/bomb.html"]
    assert skip.skipped and skip.reason == "larger than 1,000,000 bytes"
    assert crawler.summary.bytes < 200_000  # as downloaded: the bomb is small


@pytest.mark.parametrize(
    ("coding", "encode"),
    [
        ("gzip", gzip.compress),
        ("deflate", zlib.compress),
        ("deflate", lambda data: zlib.compress(data)[2:-4]),  # raw, as some servers send
        ("identity", lambda data: data),
    ],
)
def test_encoded_pages_are_decoded(hostile: HostileServer, coding: str, encode: object) -> None:
    html = links("/x.html") + "<p>" + "words " * 1000 + "</p>"
    hostile.page("/", encode(html.encode()), headers={"Content-Encoding": coding})  # type: ignore[operator]
    events, _ = run(hostile.url("/"), CrawlOptions(max_depth=0, **QUICK))
    page = pages(events)["/"]
    assert page.body == html.encode()
    assert page.links == (hostile.url("/x.html"),)


def test_an_encoding_we_did_not_ask_for_is_an_invalid_response(hostile: HostileServer) -> None:
    hostile.page("/", b"\x1b\x00compressed", headers={"Content-Encoding": "br"})
    events, _ = run(hostile.url("/"), CrawlOptions(max_depth=0, **QUICK))
    assert [e.reason for e in events if isinstance(e, CrawlFailure)] == [
        "invalid response: unsupported Content-Encoding 'br'"
    ]


def test_the_crawler_asks_only_for_the_encodings_it_decodes() -> None:
    seen: list[str | None] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("accept-encoding"))
        return httpx.Response(200, html=links())

    options = CrawlOptions(max_depth=0, headers={"Accept-Encoding": "br"}, **QUICK)
    run("https://docs.example.com/", options, transport=httpx.MockTransport(handler))
    assert seen == ["gzip, deflate, identity"]


# -- redirects and the URL policy -----------------------------------------------------


def test_a_redirect_chain_stops_at_max_redirects(hostile: HostileServer) -> None:
    hostile.redirect_chain("/r", 20, "/end.html")
    hostile.page("/end.html", links())
    events, _ = run(hostile.url("/r"), CrawlOptions(max_redirects=5, **QUICK))
    assert [e.reason for e in events if isinstance(e, CrawlFailure)] == ["too many redirects (5)"]
    assert hostile.total_hits == 6  # the first request and five redirects
    assert hostile.hits("/end.html") == 0


def test_a_policy_crawl_refuses_a_redirect_to_another_port(
    hostile: HostileServer, other: HostileServer
) -> None:
    hostile.page("/allowed/", links("/allowed/go"))
    hostile.redirect("/allowed/go", other.url("/admin"))
    hostile.redirect("/allowed/out", hostile.url("/private/"))
    rules = UrlPolicy((hostile.url("/allowed/"),))
    events, _ = run(
        hostile.url("/allowed/"), CrawlOptions(same_origin=False, **QUICK), policy=rules
    )
    refused = failures(events)["/allowed/go"]
    assert refused.skipped and refused.reason.startswith("refused by URL policy")
    assert other.total_hits == 0
    events, _ = run(hostile.url("/allowed/out"), CrawlOptions(**QUICK), policy=rules)
    assert "not under an allowed URL prefix" in events[0].reason  # type: ignore[union-attr]
    assert hostile.hits("/private/") == 0


def test_allow_private_does_not_widen_a_given_policy(
    hostile: HostileServer, other: HostileServer
) -> None:
    hostile.redirect("/allowed/start", other.url("/"))
    rules = UrlPolicy((hostile.url("/allowed/"),))
    options = CrawlOptions(allow_private=True, **QUICK)
    events, _ = run(hostile.url("/allowed/start"), options, policy=rules)
    assert [e.skipped for e in events if isinstance(e, CrawlFailure)] == [True]
    assert other.total_hits == 0


def test_a_robots_txt_redirect_to_another_port_is_never_fetched(
    hostile: HostileServer, other: HostileServer
) -> None:
    hostile.page("/allowed/", links("/allowed/a.html"))
    hostile.page("/allowed/a.html", links())
    other.robots("User-agent: *\nAllow: /\n")
    rules = UrlPolicy((hostile.url("/allowed/"),))
    for target in (other.url("/robots.txt"), other.url("/internal"), hostile.url("/secret")):
        hostile.redirect("/robots.txt", target)
        events, _ = run(hostile.url("/allowed/"), CrawlOptions(timeout=0.5), policy=rules)
        # robots.txt unreadable: everything is allowed, and nothing left the policy.
        assert set(pages(events)) == {"/allowed/", "/allowed/a.html"}
    assert other.total_hits == 0
    assert hostile.hits("/secret") == 0
    assert hostile.hits("/robots.txt") == 3


def test_a_robots_txt_redirect_under_the_prefix_is_followed(hostile: HostileServer) -> None:
    hostile.page("/allowed/", links("/allowed/a.html", "/allowed/private.html"))
    hostile.page("/allowed/a.html", links())
    hostile.redirect("/robots.txt", "/allowed/robots.txt")
    hostile.page(
        "/allowed/robots.txt",
        "User-agent: *\nDisallow: /allowed/private.html\n",
        content_type="text/plain",
    )
    rules = UrlPolicy((hostile.url("/allowed/"),))
    events, _ = run(hostile.url("/allowed/"), CrawlOptions(timeout=0.5), policy=rules)
    assert set(pages(events)) == {"/allowed/", "/allowed/a.html"}
    assert failures(events)["/allowed/private.html"].reason == "disallowed by robots.txt"
    assert hostile.hits("/allowed/private.html") == 0


def test_a_sitemap_redirect_and_its_locs_pass_the_policy(
    hostile: HostileServer, other: HostileServer
) -> None:
    other.huge_sitemap("/sitemap.xml", 10)
    hostile.redirect("/allowed/sitemap.xml", other.url("/sitemap.xml"))
    rules = UrlPolicy((hostile.url("/allowed/"),))
    events, _ = run(hostile.url("/allowed/sitemap.xml"), CrawlOptions(**QUICK), policy=rules)
    assert len(events) == 1 and isinstance(events[0], CrawlFailure) and events[0].skipped
    assert other.total_hits == 0


# -- a user's own crawl ---------------------------------------------------------------


def local_name(server: HostileServer, path: str) -> str:
    """The URL of ``path`` on ``server`` by the name ``localhost``: another host than
    127.0.0.1 to the policy, the same server to the network."""
    return f"http://localhost:{server.port}{path}"


def test_a_user_crawl_refuses_a_redirect_to_another_private_host(
    hostile: HostileServer, other: HostileServer
) -> None:
    other.page("/", links())
    hostile.redirect("/start", local_name(other, "/"))
    events, crawler = run(hostile.url("/start"), CrawlOptions(**QUICK))
    (refused,) = events
    assert isinstance(refused, CrawlFailure) and refused.skipped
    assert "refused by URL policy: host localhost is a private or reserved address" in (
        refused.reason
    )
    assert other.total_hits == 0
    assert not crawler.summary.complete

    events, _ = run(hostile.url("/start"), CrawlOptions(allow_private=True, **QUICK))
    assert [e.url for e in events if isinstance(e, CrawlPage)] == [local_name(other, "/")]
    assert other.hits("/") == 1


def test_a_user_crawl_may_go_anywhere_on_the_host_it_named(
    hostile: HostileServer, other: HostileServer
) -> None:
    other.page("/docs/", links())
    hostile.redirect("/start", other.url("/docs/"))  # 127.0.0.1, another port
    events, _ = run(hostile.url("/start"), CrawlOptions(**QUICK))
    assert set(pages(events)) == {"/docs/"}


def test_a_user_crawl_refuses_sitemap_locs_on_another_private_host(
    hostile: HostileServer, other: HostileServer
) -> None:
    other.page("/page.html", links())
    hostile.sitemap_index("/index.xml", [local_name(other, "/map.xml")])
    options = CrawlOptions(same_origin=False, **QUICK)
    events, _ = run(hostile.url("/index.xml"), options)
    assert [e.reason.split(":")[0] for e in events if isinstance(e, CrawlFailure)] == [
        "refused by URL policy"
    ]
    assert other.total_hits == 0


def test_the_core_crawls_for_a_user_under_the_user_policy(
    hostile: HostileServer, other: HostileServer, core: KnowledgeAgentCore
) -> None:
    other.page("/", links())
    hostile.redirect("/start", local_name(other, "/"))
    # The start URL reaches nothing: the add fails with why, and leaves no doc source.
    with pytest.raises(IngestError) as refused:
        core.collect_knowledge(hostile.url("/start"), crawl=CrawlOptions(**QUICK))
    assert refused.value.reason.startswith("refused by URL policy: ")
    assert other.total_hits == 0 and core.doc_sources() == []


def test_allow_private_comes_from_the_command_line_and_is_stored() -> None:
    options, _ = crawl_options_from({"allow_private": True, "max_time": 30.0})
    assert options.allow_private and options.max_time == 30.0
    assert CrawlOptions.from_dict(options.to_dict()) == options
    default, _ = crawl_options_from({})
    assert not default.allow_private


def test_fetcher_response_body_holds_the_decoded_page(hostile: HostileServer) -> None:
    hostile.page("/p.html", gzip.compress(b"<p>hello</p>"), headers={"Content-Encoding": "gzip"})
    with fetcher(CrawlOptions(timeout=5), UrlPolicy.for_user(hostile.url())) as get:
        answer = get.get(hostile.url("/p.html"), check=allow, accept=None, max_bytes=1000)
    assert isinstance(answer, Response) and answer.body == b"<p>hello</p>"
    assert get.bytes_decoded == len(b"<p>hello</p>")


# -- one GET: what the Fetcher makes of an answer --------------------------------------


def fetch_once(
    site: HostileServer,
    path: str,
    *,
    known: KnownPage | None = None,
    max_bytes: int = 10_000,
    truncate: bool = False,
) -> Response | CrawlFailure:
    """One ``Fetcher.get`` of ``path`` on ``site``, conditional when ``known`` is given."""
    with fetcher(CrawlOptions(timeout=5), UrlPolicy.for_user(site.url())) as get:
        return get.get(
            site.url(path),
            check=allow,
            accept=None,
            max_bytes=max_bytes,
            known=lambda _key: known,
            truncate=truncate,
        )


def test_a_304_to_a_plain_request_is_a_failure_naming_the_url(hostile: HostileServer) -> None:
    hostile.page("/same.html", b"", status=304)
    answer = fetch_once(hostile, "/same.html")
    assert isinstance(answer, CrawlFailure)
    assert answer.reason == "HTTP 304 to a request that was not conditional"
    assert answer.url == hostile.url("/same.html") and answer.status == 304


def test_a_304_keeps_the_known_validators_the_server_does_not_repeat(
    hostile: HostileServer,
) -> None:
    hostile.page("/same.html", b"", content_type="text/html; charset=latin-1", status=304)
    known = KnownPage(hostile.url("/same.html"), '"v1"', "Mon, 01 Jan 2024 00:00:00 GMT")
    answer = fetch_once(hostile, "/same.html", known=known)
    assert isinstance(answer, Response) and answer.status == 304 and answer.body == b""
    assert (answer.content_type, answer.charset) == ("text/html", "latin-1")
    assert (answer.etag, answer.last_modified) == (known.etag, known.last_modified)
    assert answer.known == known


def test_a_304_takes_the_validators_the_server_sends(hostile: HostileServer) -> None:
    fresh = {"ETag": '"v2"', "Last-Modified": "Tue, 02 Jan 2024 00:00:00 GMT"}
    hostile.page("/same.html", b"", headers=fresh, status=304)
    known = KnownPage(hostile.url("/same.html"), '"v1"', "Mon, 01 Jan 2024 00:00:00 GMT")
    answer = fetch_once(hostile, "/same.html", known=known)
    assert isinstance(answer, Response)
    assert (answer.etag, answer.last_modified) == ('"v2"', "Tue, 02 Jan 2024 00:00:00 GMT")


def test_a_page_over_the_limit_is_a_skip_naming_the_url(hostile: HostileServer) -> None:
    hostile.page("/big.html", b"x" * 2000)  # Content-Length says so before any body byte
    answer = fetch_once(hostile, "/big.html", max_bytes=1000)
    assert isinstance(answer, CrawlFailure) and answer.skipped
    assert answer.url == hostile.url("/big.html") and answer.reason == "larger than 1,000 bytes"
    assert answer.status == 200


def test_truncate_keeps_the_first_max_bytes_of_a_longer_page(hostile: HostileServer) -> None:
    body = bytes(range(32, 127)) * 20
    hostile.page("/long.txt", body, content_type="text/plain")
    answer = fetch_once(hostile, "/long.txt", max_bytes=1000, truncate=True)
    assert isinstance(answer, Response) and answer.body == body[:1000]


def test_an_unknown_content_encoding_fails_with_the_reason(hostile: HostileServer) -> None:
    hostile.page("/", b"\x1b\x00compressed", headers={"Content-Encoding": "br"})
    answer = fetch_once(hostile, "/")
    assert isinstance(answer, CrawlFailure) and not answer.skipped
    assert answer.reason == "invalid response: unsupported Content-Encoding 'br'"


# -- the crawl's HTTP client: proxies, HTTP/1.1 only, connections ------------------------


def without_proxies(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("http_proxy", "https_proxy", "all_proxy", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)


def loopback(_host: str) -> list[str]:
    return ["127.0.0.1"]  # every name: the guard would refuse to connect to it


@pytest.mark.parametrize("honour", [True, False])
def test_the_environments_proxy_is_used_only_when_the_policy_honours_it(
    hostile: HostileServer, monkeypatch: pytest.MonkeyPatch, honour: bool
) -> None:
    hostile.page("/page.html", links())  # the proxy: it answers for any host
    without_proxies(monkeypatch)
    monkeypatch.setenv("http_proxy", hostile.url())
    rules = UrlPolicy(("http://",), resolver=loopback, honour_proxies=honour)
    with fetcher(CrawlOptions(**QUICK), rules) as get:
        answer = get.get(
            "http://docs.example.com/page.html", check=allow, accept=None, max_bytes=1000
        )
    if honour:  # the proxy resolves the name: the request went to it
        assert isinstance(answer, Response) and answer.status == 200
        assert hostile.hits("/page.html") == 1
    else:  # the guarded connection checked the address, and the proxy was not asked
        assert isinstance(answer, CrawlFailure) and answer.skipped
        assert answer.reason.startswith("refused by URL policy: ")
        assert hostile.total_hits == 0


def offered_protocols(hello: bytes) -> list[bytes]:
    """The ALPN protocols a TLS ClientHello record offers (``[]`` without the extension)."""
    at = 5 + 4 + 2 + 32  # record and handshake headers, version, random
    at += 1 + hello[at]  # session id
    at += 2 + int.from_bytes(hello[at : at + 2], "big")  # cipher suites
    at += 1 + hello[at]  # compression methods
    end = at + 2 + int.from_bytes(hello[at : at + 2], "big")
    at += 2
    while at < end:
        kind = int.from_bytes(hello[at : at + 2], "big")
        size = int.from_bytes(hello[at + 2 : at + 4], "big")
        data, at = hello[at + 4 : at + 4 + size], at + 4 + size
        if kind == 16:  # application_layer_protocol_negotiation
            protocols, i = [], 2
            while i < len(data):
                protocols.append(data[i + 1 : i + 1 + data[i]])
                i += 1 + data[i]
            return protocols
    return []


def client_hello(listener: socket.socket) -> bytes:
    """The first TLS record a client sends to ``listener``; then the connection is closed."""
    connection, _ = listener.accept()
    with connection:
        connection.settimeout(5)
        data = b""
        while len(data) < 5 or len(data) < 5 + int.from_bytes(data[3:5], "big"):
            more = connection.recv(65536)
            if not more:
                break
            data += more
    return data


@pytest.mark.parametrize("allow_private", [False, True])
def test_the_client_offers_only_http_1_1(
    monkeypatch: pytest.MonkeyPatch, allow_private: bool
) -> None:
    # The body reader streams HTTP/1.1; h2 is not even a dependency. Both ways the client
    # is built (the guarded transport, httpx's own) are asked.
    without_proxies(monkeypatch)
    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.settimeout(5)
        url = f"https://127.0.0.1:{listener.getsockname()[1]}/"
        hello: list[bytes] = []
        server = threading.Thread(target=lambda: hello.append(client_hello(listener)))
        server.start()
        rules = UrlPolicy((url,), allow_private=allow_private)
        client = make_client(CrawlOptions(timeout=5), policy=rules, transport=None)
        with client, pytest.raises(httpx.HTTPError):  # the server hangs up after the hello
            client.get(url)
        server.join(5)
    assert hello and offered_protocols(hello[0]) == [b"http/1.1"]


@pytest.mark.parametrize("allow_private", [False, True])
def test_the_client_opens_no_more_connections_than_the_concurrency(
    hostile: HostileServer, monkeypatch: pytest.MonkeyPatch, allow_private: bool
) -> None:
    without_proxies(monkeypatch)
    hostile.page("/a.html", links())
    rules = UrlPolicy((hostile.url(),), allow_private=allow_private)
    options = CrawlOptions(concurrency=1, timeout=0.3)
    with make_client(options, policy=rules, transport=None) as client:
        # The first answer, unread, holds the only connection: the second waits in vain.
        with client.stream("GET", hostile.url("/a.html")), pytest.raises(httpx.PoolTimeout):
            client.get(hostile.url("/a.html"))
        assert client.get(hostile.url("/a.html")).status_code == 200
    assert hostile.hits("/a.html") == 2
