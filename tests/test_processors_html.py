"""HTML: main content without page chrome, as Markdown-like text; tested on a real page."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_processors_support import check_document

from knowledge_agent.errors import UnsupportedSourceError
from knowledge_agent.processors import ProcessedDocument, process_bytes, process_file
from knowledge_agent.processors import html as html_module
from knowledge_agent.processors.html_stream import MAX_NESTING

DATA = Path(__file__).parent / "data"
RUSTDOC_PAGE = DATA / "rustdoc-documentation-tests.html"

ASSERT_EQ_EXAMPLE = """\
```rust
#![allow(unused)]
fn main() {
let foo = "foo";
assert_eq!(foo, "foo");
}
```"""


@pytest.fixture(scope="module")
def rustdoc_page() -> ProcessedDocument:
    return process_file(RUSTDOC_PAGE)


def test_real_page_title_and_type(rustdoc_page: ProcessedDocument) -> None:
    assert rustdoc_page.title == "Documentation tests - The rustdoc book"
    assert (rustdoc_page.source_type, rustdoc_page.content_type) == ("html", "text/html")
    assert rustdoc_page.language is None
    assert "description" not in rustdoc_page.metadata, "the page's description meta is empty"
    check_document(rustdoc_page)


@pytest.mark.parametrize(
    "chrome",
    [
        "Keyboard shortcuts",  # help popup outside <main>
        "to navigate between chapters",
        "The rustdoc book",  # menu bar title
        "Coal",  # theme menu
        "Navy",
        "localStorage",  # inline scripts
        "playground_copyable",
        "Font Awesome",  # svg comments
    ],
)
def test_real_page_drops_navigation_and_scripts(
    rustdoc_page: ProcessedDocument, chrome: str
) -> None:
    assert chrome not in rustdoc_page.content


def test_real_page_headings_become_markdown_and_chunk_headings(
    rustdoc_page: ProcessedDocument,
) -> None:
    content = rustdoc_page.content
    assert content.startswith("# Documentation tests\n\n`rustdoc` supports executing")
    lines = content.split("\n")
    for heading in (
        "## Passing or failing a doctest",
        "## Attributes",
        "### Ignoring targets",
        "## Using `?` in doc tests",
    ):
        assert heading in lines
    headings = {chunk.heading for chunk in rustdoc_page.chunks}
    assert "Documentation tests > Passing or failing a doctest" in headings
    assert "Documentation tests > Attributes > Ignoring targets" in headings
    assert "Documentation tests > Using `?` in doc tests" in headings


def test_real_page_code_blocks_survive_verbatim(rustdoc_page: ProcessedDocument) -> None:
    content = rustdoc_page.content
    assert ASSERT_EQ_EXAMPLE in content
    holding = [c for c in rustdoc_page.chunks if ASSERT_EQ_EXAMPLE in c.content]
    assert holding and holding[0].heading.endswith("Passing or failing a doctest")
    # A block whose text holds ``` gets a longer fence, so it does not end early.
    assert "````markdown\n```rust\nlet x = 5;\n```\n````" in content
    assert "/// # fn foo() {} // this function will be hidden" in content


def test_real_page_lists_and_inline_code(rustdoc_page: ProcessedDocument) -> None:
    content = rustdoc_page.content
    assert "\n1. Some common `allow` attributes are inserted" in content
    assert "\n5. Finally, if the example does not contain `fn main`" in content
    assert "running `rustdoc --test foo.rs` will extract this example" in content


PAGE = """\
<!doctype html>
<html><head>
<meta charset="utf-8">
<meta name="description" content="  How to deploy   the service. ">
<style>body { color: red }</style>
</head>
<body>
<header><a href="/">Home</a> <a href="/blog">Blog</a></header>
<nav class="breadcrumbs">Docs / Deploy</nav>
<div id="toc"><ul><li><a href="#a">Table of contents entry</a></li></ul></div>
<div class="layout-sidebar-left">Sidebar links</div>
<div role="navigation">Role navigation links</div>
<div class="page menu-wrapper">
  <h1>Deploy <code>svc</code></h1>
  <p>First   paragraph
     spans lines.<br>After a break.</p>
  <p># not a heading</p>
  <ul>
    <li>Top item
      <ul><li>Nested item</li><li>Second nested</li></ul>
    </li>
    <li><p>Item with a paragraph</p></li>
  </ul>
  <ol start="3"><li>three</li><li>four</li></ol>
  <table>
    <thead><tr><th>Name</th><th>Value</th></tr></thead>
    <tbody><tr><td>retries</td><td>3 | 4</td></tr><tr><td>timeout</td></tr></tbody>
  </table>
  <pre><code class="language-python">def f(x):
\tif x:\x20\x20\x20
        return  1

    return 2</code></pre>
  <blockquote><p>Quoted words.</p></blockquote>
  <p>Link to <a href="https://example.com">the docs</a> and <img alt="a diagram" src="d.png">.</p>
  <form><input value="secret input"><button>Send</button></form>
</div>
<aside>Aside text</aside>
<footer>Copyright footer</footer>
<script>var tracking = 1;</script>
</body></html>
"""


def test_page_without_main_uses_body_minus_chrome() -> None:
    document = process_bytes(PAGE.encode(), "site/deploy.html")
    content = document.content
    for chrome in (
        "Home",
        "Docs / Deploy",
        "Table of contents entry",
        "Sidebar links",
        "Role navigation links",
        "Aside text",
        "Copyright footer",
        "tracking",
        "secret input",
        "Send",
        "color: red",
    ):
        assert chrome not in content, chrome
    assert document.title == "Deploy svc"
    assert document.metadata["description"] == "How to deploy the service."
    assert content.startswith("# Deploy `svc`\n\nFirst paragraph spans lines.\nAfter a break.")
    assert "\\# not a heading" in content, "paragraph text that reads as a heading is escaped"
    assert "- Top item\n  - Nested item\n  - Second nested\n- Item with a paragraph" in content
    assert "3. three\n4. four" in content
    assert "| Name | Value |\n| --- | --- |\n| retries | 3 \\| 4 |\n| timeout |  |" in content
    code = "def f(x):\n\tif x:   \n        return  1\n\n    return 2"
    assert f"```python\n{code}\n```" in content, "whitespace inside <pre> is kept exactly"
    assert "> Quoted words." in content
    assert "Link to the docs and a diagram ." in content
    check_document(document)


def test_article_header_with_title_is_kept() -> None:
    html = (
        "<html><body><nav>Menu</nav><article><header><h1>Post title</h1></header>"
        "<p>Body text of the post.</p><footer>Tags: x</footer></article></body></html>"
    )
    document = process_bytes(html.encode(), "post.html")
    assert document.content == "# Post title\n\nBody text of the post."
    assert document.title == "Post title", "no <title>: the first <h1>"


def test_title_falls_back_to_the_file_stem() -> None:
    document = process_bytes(b"<html><body><p>Only text.</p></body></html>", "a/b/page-name.htm")
    assert document.title == "page-name"


def test_declared_charset_is_used_for_non_utf8_pages() -> None:
    html = (
        '<html><head><meta charset="iso-8859-15"><title>Menü</title></head>'
        "<body><p>Grüße €</p></body></html>"
    )
    document = process_bytes(html.encode("iso-8859-15"), "menu.html")
    assert document.title == "Menü"
    assert document.content == "Grüße €"


def test_empty_page_is_unsupported() -> None:
    with pytest.raises(UnsupportedSourceError, match="empty file"):
        process_bytes(
            b"<html><body><nav>only navigation</nav><script>x()</script></body></html>", "e.html"
        )


@pytest.fixture
def streamed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every page converted in one pass, as pages over the size limit are."""
    monkeypatch.setattr(html_module, "TREE_LIMIT", 0)


@pytest.mark.parametrize(
    "page",
    [
        PAGE.encode(),
        RUSTDOC_PAGE.read_bytes(),
        b"<html><body><nav>Menu</nav><article><header><h1>Post title</h1></header>"
        b"<p>Body text of the post.</p><footer>Tags: x</footer></article></body></html>",
        b"<html><body><div class='menu'>Short menu</div><p>"
        + b"Long body text. " * 40
        + b"</p><div class='page menu'>"
        + b"Most of the words. " * 80
        + b"</div></body></html>",
        b"<html><body><dl><dt>Term</dt><dd>Definition <em>here</em></dd></dl>"
        b"<table><caption>Cap</caption><tbody><tr><td>a</td><td>b</td></tr></tbody></table>"
        b"<ol start='7'><li>seven<ol><li>inner</li></ol></li></ol>"
        b"<pre class='language-sh'>ls\n  -la</pre><div role='main'>x</div></body></html>",
    ],
    ids=["page", "rustdoc", "article", "chrome-share", "structures"],
)
def test_one_pass_conversion_matches_the_tree(page: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    tree = process_bytes(page, "p.html")
    monkeypatch.setattr(html_module, "TREE_LIMIT", 0)
    streamed = process_bytes(page, "p.html")
    assert (streamed.title, streamed.metadata) == (tree.title, tree.metadata)
    assert streamed.content == tree.content


def test_deep_page_is_converted_in_one_pass_and_flattened() -> None:
    depth = html_module.MAX_TREE_DEPTH * 4
    page = (
        "<html><head><title>Deep</title></head><body><h2>Top</h2>"
        + "<blockquote><div>" * depth
        + "inner words"
        + "</div></blockquote>" * depth
        + "</body></html>"
    )
    document = process_bytes(page.encode(), "deep.html")
    assert document.title == "Deep"
    assert document.content.startswith("## Top\n\n> > ")
    assert document.content.endswith("inner words")
    assert document.content.count(">") == MAX_NESTING


def test_streamed_page_takes_title_h1_and_description(streamed: None) -> None:
    document = process_bytes(PAGE.encode(), "site/deploy.html")
    assert document.title == "Deploy svc"
    assert document.metadata["description"] == "How to deploy the service."
    no_title = process_bytes(b"<p>Only text.</p>", "a/b/page-name.htm")
    assert (no_title.title, no_title.content) == ("page-name", "Only text.")
