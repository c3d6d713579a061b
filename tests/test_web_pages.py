"""A fetched page as a processed document: processor by media type, anchors for its chunks."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from knowledge_agent.chunking import ChunkConfig
from knowledge_agent.crawl import CrawlOptions, CrawlPage, url_key
from knowledge_agent.errors import UnsupportedSourceError
from knowledge_agent.ingest.web_pages import page_anchors, page_document

URL = "https://docs.example.com/guide/setup.html"
SMALL = ChunkConfig(min_chunk_size=20, max_chunk_size=200, overlap_ratio=0)


def page(body: bytes, content_type: str = "text/html", charset: str | None = "utf-8") -> CrawlPage:
    return CrawlPage(
        url=URL, key=url_key(URL), requested_url=URL, depth=0, status=200,
        content_type=content_type, charset=charset, body=body, etag=None, last_modified=None,
        content_hash=hashlib.sha256(body).hexdigest(), unchanged=False, links=(),
    )  # fmt: skip


def test_anchors_come_from_headings_links_and_sections() -> None:
    html = b"""<h1>Guide</h1>
    <section id="install"><h2>Installing &amp; upgrading</h2><h3 id="pip">With <code>pip</code></h3>
    </section><h2><a name="legacy"></a>Legacy setup</h2>
    <h2 id="mk">MkDocs heading<a class="headerlink" href="#mk">&para;</a></h2>
    <h2 data-id="no">Not an anchor</h2>"""
    assert page_anchors(html) == [
        ("installing upgrading", "install"),
        ("with pip", "pip"),
        ("legacy setup", "legacy"),
        ("mkdocs heading", "mk"),
    ]


def test_every_chunk_points_at_the_nearest_anchored_heading_before_it() -> None:
    body = (
        "<title>Setup</title><main><p>" + "Intro words here. " * 8 + "</p>"
        '<h2 id="install">Install</h2><p>' + "Run the installer now. " * 8 + "</p>"
        "<h2>Unanchored</h2><p>" + "Still the install section. " * 8 + "</p>"
        '<h2 id="configure">Configure</h2><p>' + "Edit the config file. " * 8 + "</p></main>"
    ).encode()
    document = page_document(page(body), CrawlOptions(), SMALL)
    by_text = {
        chunk.content.split("\n")[-1][:12]: chunk.metadata["url"] for chunk in document.chunks
    }
    assert by_text["Intro words "] == URL  # before any heading: the page itself
    assert by_text["Run the inst"] == URL + "#install"
    assert by_text["Still the in"] == URL + "#install"  # a heading without id: the one before
    assert by_text["Edit the con"] == URL + "#configure"
    assert document.title == "Setup"


def test_a_heading_inside_fenced_code_is_not_matched() -> None:
    body = b"# Real\n\n```\n# Real\n```\n\ntext of the page that is long enough to chunk.\n"
    document = page_document(page(body, "text/markdown"), CrawlOptions(), SMALL)
    assert all(chunk.metadata["anchor"] == "" for chunk in document.chunks)  # Markdown: no ids


def test_the_charset_of_the_header_is_used_when_the_page_declares_none() -> None:
    body = "<p>Le café est prêt, servez-le chaud.</p>".encode("cp1252")
    document = page_document(page(body, charset="windows-1252"), CrawlOptions(), SMALL)
    assert "café est prêt" in document.content


def test_the_content_selector_keeps_and_drop_selectors_remove() -> None:
    body = b"""<title>T</title><div class="nav">Navigation menu entries</div>
    <article><h2 id="a">Kept</h2><p>The kept paragraph.</p>
    <div class="ad">Buy now</div></article>"""
    options = CrawlOptions(content_selector="article", drop_selectors=(".ad",))
    document = page_document(page(body), options, SMALL)
    assert "kept paragraph" in document.content
    assert "Navigation" not in document.content and "Buy now" not in document.content
    assert document.chunks[0].metadata["url"] == URL + "#a"


def test_the_language_is_told_with_the_extraction() -> None:
    # A crawl stores pages under the write lock: nothing of a page is worked out there.
    chinese = page("<title>重置</title><p>如何重置密码，请先登录账户设置页面。</p>".encode())
    english = page(b"<title>Reset</title><p>How to reset a password from the settings.</p>")
    assert page_document(chinese, CrawlOptions(), SMALL).language == "zh"
    assert page_document(english, CrawlOptions(), SMALL).language == "en"


def test_an_unsupported_media_type_is_skipped_naming_the_url() -> None:
    with pytest.raises(UnsupportedSourceError) as caught:
        page_document(page(b"\x89PNG", "image/png"), CrawlOptions(), SMALL)
    assert caught.value.path == URL and "image/png" in caught.value.reason


_WORD = st.text(alphabet="abcdefghij", min_size=3, max_size=8)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(_WORD, st.booleans(), st.lists(_WORD, min_size=1, max_size=30)),
        min_size=1,
        max_size=6,
    )
)
def test_chunk_urls_always_name_the_page_and_an_anchor_of_it(sections: list) -> None:
    parts, ids = ["<title>P</title>"], set()
    for number, (name, anchored, words) in enumerate(sections):
        anchor = f"s{number}"
        if anchored:
            ids.add(anchor)
        parts.append(f'<h2 id="{anchor}">{name}</h2>' if anchored else f"<h2>{name}</h2>")
        parts.append(f"<p>{' '.join(words)}.</p>")
    document = page_document(page("".join(parts).encode()), CrawlOptions(), SMALL)
    for chunk in document.chunks:
        url, _, anchor = chunk.metadata["url"].partition("#")
        assert url == URL and anchor == chunk.metadata["anchor"]
        assert anchor == "" or anchor in ids
