"""The crawl package's pure parts: URLs, options, the URL policy, links, sitemaps,
robots.txt rules, error reasons and content selection (no server needed)."""

from __future__ import annotations

import gzip
import itertools
import json
import mimetypes
import posixpath
import socket
import ssl
import subprocess
import sys
import zlib
from urllib.parse import unquote, urlsplit

import httpcore
import httpx
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

import knowledge_agent.crawl as crawl
from knowledge_agent.crawl import (
    CrawlOptions,
    UrlPolicy,
    anchor_url,
    normalize_url,
    select_content,
    url_key,
)
from knowledge_agent.crawl.decode import STEP, Decoder
from knowledge_agent.crawl.fetch import (
    describe_error,
    parse_content_type,
    sniff_bytes,
    sniff_suffix,
)
from knowledge_agent.crawl.links import extract_links
from knowledge_agent.crawl.policy import is_public_address
from knowledge_agent.crawl.robots import MAX_CRAWL_DELAY, parse_robots
from knowledge_agent.crawl.sitemap import (
    MAX_LOC_CHARS,
    MAX_SITEMAP_LOCS,
    SitemapParser,
    parse_sitemap,
)
from knowledge_agent.errors import ConfigError

# -- the public surface --------------------------------------------------------------


def test_all_is_exactly_the_public_api() -> None:
    assert sorted(crawl.__all__) == sorted(
        [
            "CrawlFailure",
            "CrawlOptions",
            "CrawlPage",
            "CrawlSummary",
            "Crawler",
            "KnownPage",
            "UrlPolicy",
            "anchor_url",
            "normalize_url",
            "select_content",
            "url_key",
        ]
    )
    for name in crawl.__all__:
        assert getattr(crawl, name) is not None


def test_importing_the_package_imports_no_http_or_html_library() -> None:
    code = (
        "import sys, knowledge_agent.crawl\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('httpx', 'httpcore', 'bs4', 'soupsieve'))\n"
        "print(','.join(bad))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == ""


def test_a_crawler_without_httpx_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "httpx", None)  # makes `import httpx` fail
    with pytest.raises(ConfigError, match=r'pip install "knowledge-agent\[web\]"'):
        crawl.Crawler("https://docs.example.com/")


def test_a_start_url_that_is_not_http_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="ftp://"):
        crawl.Crawler("ftp://example.com/file")


# -- URLs -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("HTTP://Example.COM", "http://example.com/"),
        ("http://example.com:80/a", "http://example.com/a"),
        ("https://example.com:443/a", "https://example.com/a"),
        ("https://example.com:8443/a", "https://example.com:8443/a"),
        ("http://example.com/a/./b/../c", "http://example.com/a/c"),
        ("http://example.com/a/%2e%2E/b", "http://example.com/b"),
        ("http://example.com/%7euser/%c3%a9", "http://example.com/~user/%C3%A9"),
        ("http://example.com/caf\u00e9 bar", "http://example.com/caf%C3%A9%20bar"),
        ("http://example.com/a#section", "http://example.com/a"),
        ("http://example.com/?b=2&a=1&a=0", "http://example.com/?a=1&a=0&b=2"),
        (
            "http://example.com/p?utm_source=x&UTM_Medium=y&gclid=1&fbclid=2&msclkid=3"
            "&mc_cid=4&mc_eid=5&_ga=6&ref_src=7&keep=1",
            "http://example.com/p?keep=1",
        ),
        ("http://example.com/p?utm_source=x", "http://example.com/p"),
        ("http://example.com/p?q=100%", "http://example.com/p?q=100%25"),
        ("http://user:secret@example.com/p", "http://example.com/p"),
        ("http://[0:0::1]:8080/", "http://[::1]:8080/"),
        ("http://b\u00fccher.de/", "http://xn--bcher-kva.de/"),
        (" http://example.com/a\n/b ", "http://example.com/a/b"),
    ],
)
def test_normalize_url_examples(url: str, expected: str) -> None:
    assert normalize_url(url) == expected


@pytest.mark.parametrize(
    ("href", "base", "expected"),
    [
        ("../x", "http://h/a/b/c", "http://h/a/x"),
        ("/root", "http://h/a/b", "http://h/root"),
        ("//other.org/p", "https://h/a", "https://other.org/p"),
        ("?q=1", "http://h/a/b", "http://h/a/b?q=1"),
        ("#frag", "http://h/a/b", "http://h/a/b"),
        ("", "http://h/a/b?x=1", "http://h/a/b?x=1"),
    ],
)
def test_normalize_url_resolves_against_a_base(href: str, base: str, expected: str) -> None:
    assert normalize_url(href, base) == expected


@pytest.mark.parametrize(
    "url",
    ["ftp://example.com/", "mailto:a@b.c", "javascript:void(0)", "http:///path", "/relative",
     "http://exa mple.com/", "http://example.com:99999/", "http://example.com:port/"],
)  # fmt: skip
def test_normalize_url_refuses_what_cannot_be_fetched(url: str) -> None:
    with pytest.raises(ValueError):
        normalize_url(url)


def test_url_key_merges_trailing_slash_variants_but_keeps_the_root() -> None:
    assert url_key("http://h/docs/") == url_key("http://h/docs") == "http://h/docs"
    assert url_key("http://h/") == url_key("http://h") == "http://h/"
    assert url_key("http://h/a/?q=1") == "http://h/a?q=1"


def test_anchor_url() -> None:
    assert anchor_url("http://h/a", "install") == "http://h/a#install"
    assert anchor_url("http://h/a", None) == "http://h/a"
    assert anchor_url("http://h/a", "") == "http://h/a"


_SEGMENT = st.one_of(
    st.sampled_from([".", "..", "%2e", "%2E%2e", "", "a", "B", "~x", "%7E", "%41", "%zz", "%"]),
    st.text(
        alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="/?#\\"),
        max_size=6,
    ),
)
_QUERY_PART = st.one_of(
    st.sampled_from(["a", "B", "utm_source", "gclid", "q", "x y", "%7e", "=", "+", "%26"]),
    st.text(
        alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="&=#"),
        max_size=5,
    ),
)


@st.composite
def urls(draw: st.DrawFn) -> str:
    scheme = draw(st.sampled_from(["http", "https", "HTTP", "hTTps"]))
    host = draw(
        st.sampled_from(
            ["example.com", "EXAMPLE.com", "docs.example.org", "127.0.0.1", "[::1]",
             "b\u00fccher.de", "xn--bcher-kva.de", "a-b.c_d.example"]
        )
    )  # fmt: skip
    port = draw(st.sampled_from(["", ":80", ":443", ":8080", ":0080", ":"]))
    path = "/" + "/".join(draw(st.lists(_SEGMENT, max_size=6)))
    pairs = draw(st.lists(st.tuples(_QUERY_PART, _QUERY_PART), max_size=4))
    query = "&".join(f"{name}={value}" for name, value in pairs)
    fragment = draw(st.text(max_size=5))
    url = f"{scheme}://{host}{port}{path}"
    if query or draw(st.booleans()):
        url += "?" + query
    if fragment or draw(st.booleans()):
        url += "#" + fragment
    return url


@given(urls())
def test_normalize_url_is_idempotent_and_drops_the_fragment(url: str) -> None:
    normalized = normalize_url(url)
    assert normalize_url(normalized) == normalized
    assert "#" not in normalized
    assert url_key(normalized) == url_key(url)
    assert url_key(url_key(url)) == url_key(url)
    assert normalize_url(url_key(url)) == url_key(url)


@given(urls(), st.text(max_size=8), st.sampled_from(["utm_source", "gclid", "fbclid", "_ga"]))
def test_variants_of_one_page_share_its_key(url: str, fragment: str, tracking: str) -> None:
    base = normalize_url(url)
    key = url_key(base)
    path, sep, query = base.partition("?")
    assert url_key(f"{base}#{fragment}") == key
    assert url_key(f"{base}{'&' if sep else '?'}{tracking}=abc") == key
    scheme, rest = base.split("://", 1)
    host, _, tail = rest.partition("/")
    assert url_key(f"{scheme.upper()}://{host.upper()}/{tail}") == key
    default = {"http": ":80", "https": ":443"}[scheme]
    if ":" not in host.rsplit("]", 1)[-1]:
        assert url_key(f"{scheme}://{host}{default}/{tail}") == key
    # The other spelling of the trailing slash (not for the root, whose path is "/").
    assume(path.count("/") >= 3 and not path.endswith("//"))
    toggled = path[:-1] if path.endswith("/") else path + "/"
    assert url_key(toggled + sep + query) == key


@given(st.text(max_size=30), st.sampled_from(["http://h/a/b", "https://h:8443/x/?q=1"]))
def test_any_href_either_fails_cleanly_or_normalises_stably(href: str, base: str) -> None:
    try:
        normalized = normalize_url(href, base)
    except ValueError:
        return
    assert normalize_url(normalized) == normalized
    assert "#" not in normalized


# -- options --------------------------------------------------------------------------


def test_default_options_carry_the_package_version_in_the_user_agent() -> None:
    options = CrawlOptions()
    assert options.user_agent.startswith("knowledge-agent/")
    assert options.user_agent.endswith("(+offline knowledge base)")
    assert options.max_depth == 3 and options.max_pages == 500 and options.concurrency == 4


def test_options_round_trip_through_json() -> None:
    options = CrawlOptions(
        max_depth=1,
        include=["https://docs.example.com/*"],
        exclude=("*/changelog/*",),
        headers={"Authorization": "Bearer x", "X-Team": "docs"},
        content_selector="main",
        drop_selectors=["nav", ".sidebar"],
        delay=0.5,
        timeout=3,
    )
    assert options.include == ("https://docs.example.com/*",)
    assert options.headers == (("Authorization", "Bearer x"), ("X-Team", "docs"))
    assert isinstance(options.timeout, float)
    data = json.loads(json.dumps(options.to_dict()))
    assert CrawlOptions.from_dict(data) == options


def test_from_dict_names_an_unknown_key() -> None:
    with pytest.raises(ConfigError, match="max_deph"):
        CrawlOptions.from_dict({"max_deph": 2})


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("max_depth", -1),
        ("max_depth", 1.5),
        ("max_pages", 0),
        ("max_pages", True),
        ("concurrency", 0),
        ("concurrency", 1000),
        ("timeout", 0),
        ("timeout", -2.0),
        ("timeout", float("nan")),
        ("delay", -0.1),
        ("max_redirects", -1),
        ("max_page_bytes", 0),
        ("max_time", 0),
        ("max_time", float("inf")),
        ("same_origin", "yes"),
        ("allow_private", 1),
        ("include", [""]),
        ("exclude", [3]),
        ("headers", {"Bad:Name": "x"}),
        ("headers", {"X-Injected": "a\r\nHost: evil"}),
        ("headers", [("only-one",)]),
        ("user_agent", ""),
        ("content_selector", "div[["),
        ("drop_selectors", ["nav", "::bogus("]),
    ],
)
def test_bad_options_raise_config_error_naming_the_option(field: str, value: object) -> None:
    with pytest.raises(ConfigError, match=field):
        CrawlOptions(**{field: value})  # type: ignore[arg-type]


# -- the URL policy -------------------------------------------------------------------

_ADDRESSES = {
    "docs.example.com": ["93.184.215.14"],
    "v6.example.com": ["2606:2800:21f:cb07:6820:80da:af6b:8b2c"],
    "internal.example.com": ["10.0.0.5"],
    "split.example.com": ["93.184.215.14", "127.0.0.1"],
    "localhost": ["127.0.0.1", "::1"],
    "metadata.example.com": ["169.254.169.254"],
}


def fake_resolver(host: str) -> list[str]:
    if host not in _ADDRESSES:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
    return _ADDRESSES[host]


def policy(*prefixes: str) -> UrlPolicy:
    return UrlPolicy(allowed_prefixes=prefixes, resolver=fake_resolver)


def test_policy_allows_a_public_host_under_a_prefix() -> None:
    rules = policy("https://docs.example.com")
    assert rules.refusal("https://docs.example.com/guide/install") is None
    assert rules.refusal("HTTPS://DOCS.example.com:443/guide#x") is None
    assert "not under an allowed URL prefix" in (
        rules.refusal("https://docs.example.com.evil.net/") or ""
    )
    assert rules.refusal("http://docs.example.com/guide") is not None


def test_policy_with_a_scheme_prefix_refuses_private_addresses() -> None:
    rules = policy("http://", "https://")
    assert rules.refusal("https://docs.example.com/") is None
    assert rules.refusal("https://v6.example.com/") is None
    for url in [
        "http://localhost:8000/",
        "http://127.0.0.1:8000/",
        "http://[::1]/",
        "http://[::ffff:127.0.0.1]/",
        "http://169.254.169.254/latest/meta-data/",
        "http://metadata.example.com/",
        "http://internal.example.com/",
        "http://split.example.com/",
        "http://0.0.0.0/",
        "http://224.0.0.1/",
        "http://100.100.100.200/",  # carrier-grade NAT: a cloud metadata service lives here
    ]:
        reason = rules.refusal(url)
        assert reason is not None and "private or reserved" in reason, url


def test_policy_allows_a_private_host_only_when_a_prefix_names_it() -> None:
    rules = policy("http://", "http://127.0.0.1:8000/")
    assert rules.refusal("http://127.0.0.1:8000/docs/") is None
    assert rules.refusal("http://127.0.0.1:9000/docs/") is not None
    assert rules.refusal("http://localhost:8000/docs/") is not None
    assert policy("http://127.0.0.1:8000/docs/").refusal("http://127.0.0.1:8000/admin") is not None


def test_policy_refuses_hosts_that_do_not_resolve_and_urls_that_are_not_http() -> None:
    rules = policy("http://", "https://")
    assert "does not resolve" in (rules.refusal("https://nowhere.example.com/") or "")
    assert rules.refusal("file:///etc/passwd") is not None
    assert rules.refusal("gopher://docs.example.com/") is not None


def test_a_prefix_is_a_folder_not_a_string_start() -> None:
    for prefix in ("https://docs.example.com/docs", "https://docs.example.com/docs/"):
        rules = policy(prefix)
        assert rules.refusal("https://docs.example.com/docs") is None
        assert rules.refusal("https://docs.example.com/docs/") is None
        assert rules.refusal("https://docs.example.com/docs/x/y.html?q=1") is None
        for outside in (
            "https://docs.example.com/docs-private/",
            "https://docs.example.com/docsx",
            "https://docs.example.com/",
            "https://docs.example.com/docs/../secret",
            "https://docs.example.com/docs/%2e%2e/secret",
        ):
            assert "not under an allowed URL prefix" in (rules.refusal(outside) or ""), outside


@pytest.mark.parametrize(
    "path",
    [
        "/docs/..%2Fsecret",
        "/docs/..%2fsecret",
        "/docs/..%5Csecret",
        "/docs/..%5csecret",
        "/docs/..\\secret",
        "/docs/..;/secret",
        "/docs/%252e%252e/secret",
        "/docs/..%252Fsecret",
    ],
)
def test_an_encoded_separator_never_is_under_a_folder(path: str) -> None:
    reason = policy("https://docs.example.com/docs/").refusal("https://docs.example.com" + path)
    assert reason is not None and "never is under a folder" in reason


def test_a_prefix_that_is_no_url_is_a_config_error() -> None:
    for bad in ("", "docs.example.com/docs", "ftp://docs.example.com/", "https:"):
        with pytest.raises(ConfigError, match="allowed URL prefix"):
            UrlPolicy((bad,))


_SEGMENTS = [
    "docs", "docs-private", "a", "", ".", "..", "%2e%2e", "%2E.", ".%2e", "%2F", "%2f",
    "%5C", "%5c", "\\", "..;", "..;x", ".;", "%252F", "%252e%252e", "docs%2Fx", "%00",
]  # fmt: skip


def _readings(path: str) -> list[str]:
    """Every way a lenient server might read ``path``: decoded up to three times,
    backslashes as slashes, ``;`` parameters dropped, dot segments resolved."""
    readings = []
    for _ in range(4):
        plain = path.replace("\\", "/")
        plain = "/".join(segment.split(";", 1)[0] for segment in plain.split("/"))
        readings.append(posixpath.normpath(plain) if plain else "/")
        path = unquote(path)
    return readings


@given(
    st.lists(st.sampled_from(_SEGMENTS), max_size=6),
    st.sampled_from(["https://h.example.com/docs", "https://h.example.com/docs/"]),
)
def test_no_url_outside_the_folder_is_ever_allowed(segments: list[str], prefix: str) -> None:
    url = "https://h.example.com/" + "/".join(segments)
    if policy(prefix).refusal(url) is None:
        # What goes out is the normalised URL: judge every reading of that.
        for reading in _readings(urlsplit(normalize_url(url)).path):
            assert reading == "/docs" or reading.startswith("/docs/"), (url, reading)


def test_robots_txt_of_a_prefix_origin_is_allowed_and_nothing_else_beside_it() -> None:
    rules = policy("http://127.0.0.1:8000/allowed/")
    assert rules.robots_refusal("http://127.0.0.1:8000/robots.txt") is None
    assert rules.robots_refusal("http://127.0.0.1:8000/allowed/robots.txt") is None
    for hop in (
        "http://127.0.0.1:9000/robots.txt",  # another port: another origin
        "http://127.0.0.1:8000/robots.txt?x=1",
        "http://127.0.0.1:8000/secret",
        "http://localhost:8000/robots.txt",
        "http://169.254.169.254/latest/meta-data/",
    ):
        assert rules.robots_refusal(hop) is not None, hop
    public = policy("https://")
    assert public.robots_refusal("https://docs.example.com/robots.txt") is None
    assert public.robots_refusal("https://internal.example.com/robots.txt") is not None


def test_a_user_policy_allows_public_hosts_and_only_the_private_host_it_named() -> None:
    rules = UrlPolicy.for_user("http://127.0.0.1:8000/docs/", resolver=fake_resolver)
    assert rules.refusal("https://docs.example.com/x") is None
    assert rules.refusal("http://127.0.0.1:9999/anything") is None  # the host named
    for url in ("http://localhost:8000/", "http://169.254.169.254/", "http://10.0.0.5/"):
        assert "private or reserved" in (rules.refusal(url) or ""), url
    assert rules.checks_addresses and rules.names_host("127.0.0.1")
    lenient = UrlPolicy.for_user("http://127.0.0.1:8000/", allow_private=True)
    assert lenient.refusal("http://169.254.169.254/") is None
    assert not lenient.checks_addresses


@pytest.mark.parametrize(
    ("address", "public"),
    [("93.184.215.14", True), ("8.8.8.8", True), ("10.1.2.3", False), ("172.16.0.1", False),
     ("192.168.1.1", False), ("127.0.0.1", False), ("169.254.169.254", False),
     ("0.0.0.0", False), ("255.255.255.255", False), ("::1", False), ("fe80::1", False),
     ("fc00::1", False), ("::ffff:10.0.0.1", False), ("2002:7f00:1::", False),
     ("2606:4700:4700::1111", True), ("not an address", False)],
)  # fmt: skip
def test_is_public_address(address: str, public: bool) -> None:
    assert is_public_address(address) is public


# -- links ----------------------------------------------------------------------------


def test_links_are_resolved_normalised_deduplicated_in_page_order() -> None:
    html = b"""<html><head><base href="/docs/v2/"></head><body>
    <a href="intro.html#top">Intro</a>
    <a href="intro.html?utm_source=nav">Intro again</a>
    <map><area href="../v1/old.html" alt="old"></map>
    <a href="https://other.example.org/x">other</a>
    <a href="mailto:someone@example.com">mail</a><a href="javascript:void(0)">js</a>
    <a name="anchor-without-href">x</a><link href="/style.css" rel="stylesheet">
    <A HREF="Guide.html">upper-case tag</A>
    </body></html>"""
    links = extract_links(html, "https://docs.example.com/start/page.html")
    assert links == (
        "https://docs.example.com/docs/v2/intro.html",
        "https://docs.example.com/docs/v1/old.html",
        "https://other.example.org/x",
        "https://docs.example.com/docs/v2/Guide.html",
    )


def test_links_of_a_legacy_encoded_page() -> None:
    html = '<meta charset="windows-1252"><a href="caf\u00e9.html">x</a>'.encode("cp1252")
    assert extract_links(html, "http://h/") == ("http://h/caf%C3%A9.html",)


# -- sitemaps -------------------------------------------------------------------------


def test_sitemap_urlset_and_index_namespaced_or_not() -> None:
    urlset = b"""<?xml version="1.0"?>
    <urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">
      <url><loc> https://h/a </loc><lastmod>2024-01-01</lastmod></url>
      <url><loc>https://h/b?x=1&amp;y=2</loc></url><url></url>
    </urlset>"""
    parsed = parse_sitemap(urlset)
    assert parsed.kind == "urlset"
    assert parsed.locs == ("https://h/a", "https://h/b?x=1&y=2")
    index = b"<sitemapindex><sitemap><loc>https://h/s1.xml</loc></sitemap></sitemapindex>"
    assert parse_sitemap(gzip.compress(index)).locs == ("https://h/s1.xml",)


@pytest.mark.parametrize(
    "body",
    [
        b"<rss><channel/></rss>",
        b"<urlset><url><loc>x</loc>",
        b'<!DOCTYPE x [<!ENTITY a "aaaa">]><urlset><url><loc>&a;</loc></url></urlset>',
        b"\x1f\x8b not really gzip",
    ],
)
def test_what_is_not_a_sitemap_is_a_value_error(body: bytes) -> None:
    with pytest.raises(ValueError):
        parse_sitemap(body)


def test_a_gzipped_sitemap_is_unpacked_a_step_at_a_time_up_to_its_limit() -> None:
    bomb = gzip.compress(b"<urlset>" + b" " * 20_000_000 + b"</urlset>")
    assert len(bomb) < 50_000
    parser = SitemapParser(max_bytes=1_000_000)
    assert parser.feed(bomb)  # the rest need not be read
    with pytest.raises(ValueError, match="larger than 1,000,000 bytes"):
        parser.close()
    assert parser.bytes_parsed <= 1_000_000 + STEP


def urlset(count: int, start: int = 0) -> bytes:
    entries = "".join(f"<url><loc>https://h/{n}</loc></url>" for n in range(start, count))
    return f"<urlset>{entries}</urlset>".encode()


def test_the_parser_keeps_what_keep_returns_up_to_its_limit_then_stops() -> None:
    def keep(kind: str, loc: str) -> str | None:
        assert kind == "urlset"
        return None if loc.endswith(("1", "3")) else loc.upper()

    parser = SitemapParser(keep=keep, max_urls=3)
    assert parser.feed(urlset(100))
    parsed = parser.close()
    assert parsed.locs == ("HTTPS://H/0", "HTTPS://H/2", "HTTPS://H/4")
    assert parsed.truncated
    exact = SitemapParser(max_urls=3)
    assert not exact.feed(urlset(3))
    assert exact.close() == parse_sitemap(urlset(3))
    assert not exact.close().truncated


def test_the_parser_stops_after_the_protocols_limit_of_locs() -> None:
    parser = SitemapParser(keep=lambda _kind, _loc: None)
    assert parser.feed(urlset(MAX_SITEMAP_LOCS + 10))
    assert parser.close().truncated and parser.close().locs == ()


def test_an_overlong_loc_is_dropped_and_a_byte_at_a_time_feed_works() -> None:
    body = (
        b"<urlset><url><loc>https://h/" + b"x" * MAX_LOC_CHARS + b"</loc></url>"
        b"<url><loc>https://h/ok</loc></url></urlset>"
    )
    for data in (body, gzip.compress(body)):
        parser = SitemapParser()
        for index in range(len(data)):
            parser.feed(data[index : index + 1])
        assert parser.close().locs == ("https://h/ok",)


_LAUGHS = (
    '<?xml version="1.0" encoding="{}"?><!DOCTYPE urlset [<!ENTITY a "aaaaaaaaaa">'
    '<!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">]><urlset><url><loc>&b;</loc></url></urlset>'
)


@pytest.mark.parametrize(
    ("encoding", "bom", "codec"),
    [
        ("UTF-8", b"", "utf-8"),
        ("UTF-16", b"\xff\xfe", "utf-16-le"),
        ("UTF-16", b"\xfe\xff", "utf-16-be"),
        ("ISO-8859-1", b"", "latin-1"),
    ],
)
def test_entity_declarations_are_refused_in_every_encoding(
    encoding: str, bom: bytes, codec: str
) -> None:
    body = bom + _LAUGHS.format(encoding).encode(codec)
    with pytest.raises(ValueError, match="declares XML entities"):
        parse_sitemap(body)
    with pytest.raises(ValueError, match="declares XML entities"):
        parse_sitemap(gzip.compress(body))
    external = '<!DOCTYPE urlset [<!ENTITY x SYSTEM "file:///etc/passwd">]><urlset/>'
    with pytest.raises(ValueError, match="declares XML entities"):
        parse_sitemap(bom + external.encode(codec))


# -- decoding -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("coding", "encode"),
    [
        ("gzip", gzip.compress),
        ("x-gzip", lambda data: gzip.compress(data[:500]) + gzip.compress(data[500:])),
        ("deflate", zlib.compress),
        ("deflate", lambda data: zlib.compress(data)[2:-4]),
        ("", lambda data: data),
        ("Identity", lambda data: data),
    ],
)
@given(cuts=st.lists(st.integers(min_value=0, max_value=2000), max_size=8))
def test_the_decoder_gives_the_body_back_however_it_is_split(
    coding: str, encode: object, cuts: list[int]
) -> None:
    body = b"".join(b"line %d of the body\n" % n for n in range(200))
    data = encode(body)  # type: ignore[operator]
    inner = {cut for cut in cuts if 0 < cut < len(data)}
    for splits in (inner, inner | {1}):  # a first chunk too short to tell zlib from raw
        decoder = Decoder(coding, step=100)
        bounds = sorted({0, len(data), *splits})
        pieces = [
            piece
            for start, end in itertools.pairwise(bounds)
            for piece in decoder.decode(data[start:end])
        ]
        assert b"".join(pieces) == body
        assert all(len(piece) <= 100 for piece in pieces)


def test_the_decoder_gives_a_bomb_one_step_at_a_time() -> None:
    bomb = gzip.compress(b" " * 5_000_000)
    pieces = Decoder("gzip").decode(bomb)
    taken = [next(pieces) for _ in range(3)]
    assert [len(piece) for piece in taken] == [STEP] * 3


def test_the_decoder_refuses_other_codings_and_corrupt_data() -> None:
    for coding in ("br", "zstd", "gzip, gzip", "compress"):
        with pytest.raises(ValueError, match="unsupported Content-Encoding"):
            Decoder(coding)
    with pytest.raises(ValueError, match="bad gzip data"):
        list(Decoder("gzip").decode(b"\x1f\x8b not really gzip"))


# -- robots.txt -----------------------------------------------------------------------


def test_robots_rules_for_our_agent_and_crawl_delay() -> None:
    text = """
User-agent: *
Disallow: /private/
Crawl-delay: 2

User-agent: knowledge-agent
Disallow: /no-agents/
Crawl-delay: 100000
"""
    ours = parse_robots(text, "knowledge-agent/1.0 (+offline knowledge base)")
    assert not ours.allows("http://h/no-agents/page")
    assert ours.allows("http://h/private/page")  # the specific group replaces the * one
    assert ours.crawl_delay == MAX_CRAWL_DELAY
    other = parse_robots(text, "other-bot/2.0")
    assert not other.allows("http://h/private/page")
    assert other.allows("http://h/docs/")
    assert other.crawl_delay == 2.0


# -- content types and error reasons --------------------------------------------------


def test_content_type_parsing_and_sniffing() -> None:
    assert parse_content_type('Text/HTML; Charset="ISO-8859-1"') == ("text/html", "ISO-8859-1")
    assert parse_content_type(None) == ("", None)
    assert sniff_suffix("http://h/a/readme.md") == "text/markdown"
    assert sniff_suffix("http://h/a/img.PNG") == "image/png"
    assert sniff_suffix("http://h/a/") is None
    assert sniff_bytes(b"%PDF-1.7 ...") == "application/pdf"
    assert sniff_bytes(b"\n  <!DOCTYPE html><html>") == "text/html"
    assert sniff_bytes(b"\x89PNG\r\n\x1a\n\0\0") == "application/octet-stream"
    assert sniff_bytes(b"Just some words.") == "text/plain"


def test_a_content_type_parameter_is_split_at_its_first_equals_sign() -> None:
    assert parse_content_type('text/html; charset="a=b"') == ("text/html", "a=b")
    assert parse_content_type("text/plain; format=flowed; charset=utf-8") == (
        "text/plain",
        "utf-8",
    )
    assert parse_content_type("text/plain; charset=") == ("text/plain", None)


@given(
    st.sampled_from(["text/html", "text/plain", "application/xml"]),
    st.text(alphabet="abcUTF-8_=:.", min_size=1, max_size=12),
    st.sampled_from(["", '"', "'"]),
)
def test_any_charset_value_comes_back_whole(media: str, charset: str, quote: str) -> None:
    header = f"{media.upper()}; boundary=x=y; charset={quote}{charset}{quote}"
    assert parse_content_type(header) == (media, charset)


def test_xml_is_sniffed_as_xhtml_only_when_it_holds_an_html_element() -> None:
    declaration = b'<?xml version="1.0" encoding="utf-8"?>\n'
    xhtml = declaration + b'<html xmlns="http://www.w3.org/1999/xhtml"><p>x</p></html>'
    assert sniff_bytes(xhtml) == "application/xhtml+xml"
    assert sniff_bytes(b"\xef\xbb\xbf" + xhtml.upper()) == "application/xhtml+xml"
    assert sniff_bytes(declaration + b"<urlset><url><loc>x</loc></url></urlset>") == (
        "application/xml"
    )


def test_the_suffix_is_that_of_the_last_path_segment_as_written() -> None:
    assert sniff_suffix("http://h/v1.2/readme") is None  # a dot in a folder is no suffix
    assert sniff_suffix("http://h/a/my notes.md?x=1.pdf") == "text/markdown"
    # A name ending in a blank has no known suffix: ".md " is not ".md".
    assert sniff_suffix("http://h/a/notes.md ") is None
    assert sniff_suffix("http://h/a/notes.md\u00a0") is None


def test_a_suffix_only_the_lenient_mimetypes_table_knows_is_used(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Types like .pict are in Python's non-standard table only; one made up is sure to be.
    mimetypes.guess_type("x.txt")  # the tables are loaded before one is patched
    monkeypatch.setitem(mimetypes.common_types, ".kaq", "application/x-kaq")
    assert mimetypes.guess_type("x.kaq", strict=True) == (None, None)
    assert sniff_suffix("http://h/a/data.KAQ") == "application/x-kaq"


def _chained(outer: Exception, inner: BaseException) -> Exception:
    middle = httpcore.ConnectError(str(inner))
    middle.__cause__ = inner
    outer.__cause__ = middle
    return outer


def test_error_reasons_name_the_cause() -> None:
    gai = socket.gaierror(socket.EAI_NONAME, "Name or service not known")
    assert describe_error(_chained(httpx.ConnectError("x"), gai), 2) == (
        "not found: name does not resolve"
    )
    refused = ConnectionRefusedError(111, "Connection refused")
    assert describe_error(_chained(httpx.ConnectError("x"), refused), 2) == "connection refused"
    assert describe_error(httpx.ReadTimeout("read"), 2.0) == "timed out after 2.0 s"
    assert describe_error(httpx.ConnectTimeout("c"), 0.25) == "timed out after 0.25 s"
    assert describe_error(httpx.RemoteProtocolError("bad status line"), 1).startswith(
        "invalid response"
    )
    assert describe_error(httpx.ConnectError("[Errno -3] getaddrinfo failed"), 1) == (
        "not found: name does not resolve"
    )


def _verify_error(message: str, reason: str) -> ssl.SSLCertVerificationError:
    error = ssl.SSLCertVerificationError(1, "[SSL: CERTIFICATE_VERIFY_FAILED] verify failed")
    error.verify_message, error.reason = message, reason  # set by the ssl module when real
    return error


def test_a_tls_error_gives_the_verify_message_or_else_the_reason() -> None:
    def reason(inner: BaseException) -> str:
        return describe_error(_chained(httpx.ConnectError("x"), inner), 1)

    found = _verify_error("self-signed certificate", "CERTIFICATE_VERIFY_FAILED")
    assert reason(found) == "TLS error: self-signed certificate"
    bare = _verify_error("", "CERTIFICATE_VERIFY_FAILED")
    assert reason(bare) == "TLS error: CERTIFICATE_VERIFY_FAILED"
    nothing = _verify_error("", "")
    assert reason(nothing) == f"TLS error: {nothing}"
    # Without the ssl exception in the chain, httpx's message tells a TLS error by its words.
    for message in ("certificate verify failed: unable to get issuer", "[SSL] bad record"):
        assert describe_error(httpx.ConnectError(message), 1) == f"TLS error: {message}"
    assert describe_error(httpx.ConnectError("no route to host"), 1) == (
        "could not connect: no route to host"
    )


# -- content selection ----------------------------------------------------------------

_PAGE = """<!DOCTYPE html><html lang="de"><head><title>Install &amp; run</title>
<meta charset="windows-1252"></head><body>
<nav class="sidebar"><a href="/">Home</a> sidebar words</nav>
<main><h1 id="install">Install</h1><p>Gr\u00fc\u00dfe from the main text.</p>
<div class="ad">buy things</div>
<h2 id="run-it">Run it</h2><p>Run the thing.</p></main>
<footer>footer words</footer></body></html>"""


def test_select_content_keeps_the_selected_element_title_and_heading_ids() -> None:
    out = select_content(_PAGE.encode("cp1252"), "windows-1252", "main", [".ad"]).decode("utf-8")
    assert '<meta charset="utf-8">' in out
    assert "<title>Install &amp; run</title>" in out
    assert '<html lang="de">' in out
    assert '<h1 id="install">' in out and '<h2 id="run-it">' in out
    assert "Gr\u00fc\u00dfe from the main text." in out
    for dropped in ("sidebar words", "footer words", "buy things"):
        assert dropped not in out


def test_select_content_falls_back_to_the_whole_body() -> None:
    body = _PAGE.encode("cp1252")
    for selector in (None, "article.missing"):
        out = select_content(body, None, selector, ["nav", "footer"]).decode("utf-8")
        assert "Gr\u00fc\u00dfe" in out and "buy things" in out
        assert "sidebar words" not in out and "footer words" not in out
        assert out.count("<body>") == 1


def test_select_content_keeps_nested_matches_once() -> None:
    html = (
        b"<body><div class='c'>outer <div class='c'>inner</div></div><div class='c'>2</div></body>"
    )
    out = select_content(html, "utf-8", ".c", []).decode()
    assert out.count("inner") == 1 and "2</div>" in out


def test_select_content_rejects_a_bad_selector() -> None:
    with pytest.raises(ConfigError, match="content_selector"):
        select_content(b"<p>x</p>", None, "p[[", [])
