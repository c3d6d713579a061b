"""Processors: the registry, decoding, text formats, errors and the shared invariants."""

from __future__ import annotations

import codecs
import logging
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_processors_support import (
    SOURCE_TYPES,
    check_document,
    chunk_size,
    size_limit,
    window_configs,
)

from knowledge_agent.chunking import ChunkConfig
from knowledge_agent.errors import IngestError, UnsupportedSourceError
from knowledge_agent.processors import (
    SUPPORTED_EXTENSIONS,
    BaseDataSourceProcessor,
    process_bytes,
    process_file,
    processor_for,
)
from knowledge_agent.processors import base as base_module
from knowledge_agent.processors.code import CodeProcessor
from knowledge_agent.processors.encoding import (
    decode_bytes,
    looks_binary,
    unmarked_utf_encoding,
)
from knowledge_agent.processors.front_matter import parse_front_matter
from knowledge_agent.processors.html import HtmlProcessor
from knowledge_agent.processors.pdf import PdfProcessor
from knowledge_agent.processors.rst import RstProcessor, find_rst_headings
from knowledge_agent.processors.text import (
    DataProcessor,
    LogProcessor,
    MarkdownProcessor,
    TextProcessor,
)

LOREM = (
    "Whoosh is a library of classes and functions for indexing text and then searching the "
    "index. It allows you to develop custom search engines for your content. "
)
CHINESE = "如何重置密码？请打开设置页面。"
PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x10" + bytes(range(256)) * 4


# --------------------------------------------------------------------------- registry


@pytest.mark.parametrize(
    ("path", "head", "expected"),
    [
        ("notes.md", b"# Notes", MarkdownProcessor),
        ("NOTES.MARKDOWN", b"# Notes", MarkdownProcessor),
        ("guide.rst", b"Guide\n=====", RstProcessor),
        ("a.txt", b"hello", TextProcessor),
        # A Sphinx source kept as .txt (Django's docs): a title and reST markup.
        ("cache.txt", b"=====\nCache\n=====\n\n.. code-block:: text\n\n    x", RstProcessor),
        ("notes.txt", b"Notes\n=====\n\nNo markup here.", TextProcessor),
        ("list.txt", b".. note:: no title in sight", TextProcessor),
        ("page.html", b"<p>x</p>", HtmlProcessor),
        ("page.HTM", b"<p>x</p>", HtmlProcessor),
        ("paper.pdf", b"%PDF-1.7", PdfProcessor),
        ("tool.py", b"import os", CodeProcessor),
        ("app.tsx", b"export const x = 1", CodeProcessor),
        ("main.go", b"package main", CodeProcessor),
        ("config.yaml", b"a: 1", DataProcessor),
        ("data.json", b"{}", DataProcessor),
        ("table.csv", b"a,b", DataProcessor),
        ("server.log", b"INFO start", LogProcessor),
        ("README", b"Just some words.", TextProcessor),
        ("page", b"  <!DOCTYPE html><html><body>x</body></html>", HtmlProcessor),
        ("page", b"<html lang='en'>", HtmlProcessor),
        ("script", b"#!/usr/bin/env python3\nprint(1)", CodeProcessor),
        ("run", b"#!/bin/sh\necho hi", CodeProcessor),
        ("Makefile", b"all:\n\tcc main.c", CodeProcessor),
        ("proj/CMakeLists.txt", b"project(demo)", CodeProcessor),
        ("scan", b"%PDF-1.4\n%\xe2\xe3", PdfProcessor),
        ("image.png", PNG, None),
        ("notes.txt", PNG, None),
        ("blob", bytes(range(32)) * 10, None),
        ("utf16.txt", codecs.BOM_UTF16_LE + "hi".encode("utf-16-le"), TextProcessor),
    ],
)
def test_processor_for(
    path: str, head: bytes, expected: type[BaseDataSourceProcessor] | None
) -> None:
    assert processor_for(path, head) is expected


def test_supported_extensions_are_lowercase_with_dot() -> None:
    assert {".md", ".txt", ".rst", ".html", ".pdf", ".py", ".json", ".log"} <= SUPPORTED_EXTENSIONS
    assert all(ext.startswith(".") and ext == ext.lower() for ext in SUPPORTED_EXTENSIONS)


def test_every_processor_declares_its_contract() -> None:
    for processor in (
        MarkdownProcessor,
        RstProcessor,
        TextProcessor,
        HtmlProcessor,
        PdfProcessor,
        CodeProcessor,
        DataProcessor,
        LogProcessor,
    ):
        assert processor.name and processor.content_type
        assert processor.source_type in SOURCE_TYPES
        assert processor.extensions and processor.extensions <= SUPPORTED_EXTENSIONS


# --------------------------------------------------------------------------- encoding


@pytest.mark.parametrize(
    ("data", "text", "encoding"),
    [
        (b"plain", "plain", "utf-8"),
        (codecs.BOM_UTF8 + "héllo".encode(), "héllo", "utf-8-sig"),
        (codecs.BOM_UTF16_LE + "héllo 你好".encode("utf-16-le"), "héllo 你好", "utf-16-le"),
        (codecs.BOM_UTF16_BE + "héllo".encode("utf-16-be"), "héllo", "utf-16-be"),
        (codecs.BOM_UTF32_LE + "héllo".encode("utf-32-le"), "héllo", "utf-32-le"),
        ("Café crème – déjà vu".encode("cp1252"), "Café crème – déjà vu", "cp1252"),
        (
            "如何重置密码？请打开设置页面。".encode("gb18030"),
            "如何重置密码？请打开设置页面。",
            "gb18030",
        ),
        (b"a\r\nb\rc\n", "a\nb\nc\n", "utf-8"),
        (b"\x81\x8d\x8f caf\xe9", "\x81\x8d\x8f café", "latin-1"),
    ],
)
def test_decode_bytes(data: bytes, text: str, encoding: str) -> None:
    assert decode_bytes(data) == (text, encoding)


def test_decode_uses_the_declared_charset_when_utf8_fails() -> None:
    data = "Grüße".encode("iso-8859-15")
    assert decode_bytes(data, declared="iso-8859-15") == ("Grüße", "iso8859-15")
    assert decode_bytes(data, declared="no-such-charset")[0] == "Grüße"


@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=300))
def test_decode_bytes_never_raises_and_normalises_newlines(data: bytes) -> None:
    text, encoding = decode_bytes(data)
    assert "\r" not in text
    codecs.lookup(encoding)


def test_looks_binary() -> None:
    assert looks_binary(PNG)
    assert looks_binary(b"abc\x00def")
    assert looks_binary(bytes(range(1, 32)) * 8)
    assert not looks_binary(b"")
    assert not looks_binary("plain text, ümlauts, 中文\n\tindented\r\n".encode())
    assert not looks_binary(b"\x1b[31mred log line\x1b[0m\n")
    assert not looks_binary(codecs.BOM_UTF16_LE + "text".encode("utf-16-le"))


# --------------------------------------------------------------------------- bad input


def test_binary_file_is_unsupported(tmp_path: Path) -> None:
    path = tmp_path / "picture.png"
    path.write_bytes(PNG)
    with pytest.raises(UnsupportedSourceError) as info:
        process_file(path)
    assert info.value.path == str(path)
    assert info.value.reason == "binary file"


def test_binary_content_with_a_text_extension_is_unsupported() -> None:
    with pytest.raises(UnsupportedSourceError, match="binary file"):
        process_bytes(PNG, "disguised.md")


@pytest.mark.parametrize("codec", ["utf-16-le", "utf-16-be", "utf-32-le", "utf-32-be"])
@pytest.mark.parametrize(
    "text",
    ["Plain ASCII notes\nline two", "Grüße, ümlauts", "中文的说明文字，第二句话在这里。\n" * 3],
)
def test_utf16_and_utf32_without_a_bom_are_text(codec: str, text: str) -> None:
    data = text.encode(codec)
    assert not looks_binary(data)
    assert unmarked_utf_encoding(data) == codec
    assert decode_bytes(data) == (text, codec)
    document = process_bytes(data, "notes.txt")
    assert (document.content, document.metadata["encoding"]) == (text, codec)


def test_unmarked_utf16_html_is_recognised_as_html() -> None:
    data = "<!doctype html><html><body><p>Wide page</p></body></html>".encode("utf-16-le")
    document = process_bytes(data, "page")
    assert (document.source_type, document.content) == ("html", "Wide page")


@pytest.mark.parametrize(
    "data",
    [
        b"abc\x00def",
        bytes(range(256)) * 4,
        b"\x00\x00\x00\x01" * 64,  # big-endian integers: NUL bytes but no text
        b"ab\x00\x00" + b"\x00\xd8" * 100,  # lone UTF-16 surrogates
    ],
)
def test_nul_bytes_that_are_not_utf16_or_utf32_stay_binary(data: bytes) -> None:
    assert looks_binary(data)
    with pytest.raises(UnsupportedSourceError) as info:
        process_bytes(data, "notes.txt")
    assert info.value.reason == (
        "unrecognised text encoding: NUL bytes that are not laid out as UTF-16 or UTF-32 text"
    )
    with pytest.raises(UnsupportedSourceError) as info:
        process_bytes(data, "blob.bin")
    assert info.value.reason == "binary file"


def test_lone_surrogates_in_extracted_text_become_replacement_characters() -> None:
    from knowledge_agent.processors.base import file_stem

    assert file_stem("/docs/bad\udcffname.md") == "bad\ufffdFFname"
    document = process_bytes(
        b"plain words", b"/docs/bad\xff.txt".decode("utf-8", "surrogateescape")
    )
    assert document.title == "bad\ufffdFF"


@pytest.mark.parametrize(
    "data", [b"", b"   \n\t\r\n  ", codecs.BOM_UTF16_LE + " \n".encode("utf-16-le")]
)
def test_empty_or_blank_file_is_unsupported(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "empty.md"
    path.write_bytes(data)
    with pytest.raises(UnsupportedSourceError) as info:
        process_file(path)
    assert info.value.path == str(path)
    assert info.value.reason == "empty file"


def test_file_over_the_size_limit_is_unsupported(tmp_path: Path) -> None:
    path = tmp_path / "big.txt"
    path.write_bytes(b"x" * 3000)
    with pytest.raises(UnsupportedSourceError) as info:
        process_file(path, max_file_size=1024)
    assert "MB limit" in info.value.reason
    assert info.value.path == str(path)
    assert process_file(path, max_file_size=3000).content == "x" * 3000


def test_size_limit_message_names_megabytes(tmp_path: Path) -> None:
    path = tmp_path / "big.txt"
    path.write_bytes(b"x" * (2 * 1024 * 1024 + 1))
    with pytest.raises(UnsupportedSourceError, match="larger than the 2 MB limit"):
        process_file(path, max_file_size=2 * 1024 * 1024)


def test_missing_file_is_an_ingest_error(tmp_path: Path) -> None:
    path = tmp_path / "nope.md"
    with pytest.raises(IngestError) as info:
        process_file(path)
    assert not isinstance(info.value, UnsupportedSourceError)
    assert info.value.path == str(path)
    assert info.value.reason == os.strerror(2)  # "No such file or directory"


def test_directory_is_an_ingest_error(tmp_path: Path) -> None:
    with pytest.raises(IngestError) as info:
        process_file(tmp_path)
    assert info.value.path == str(tmp_path)


def test_invalid_utf8_is_decoded_not_rejected() -> None:
    data = b"# Caf\xe9\n\nThe caf\xe9 serves cr\xe8me br\xfbl\xe9e.\n\xff\xfe is odd."
    document = process_bytes(data, "menu.md")
    assert document.title == "Café"
    assert "crème brûlée" in document.content
    assert document.metadata["encoding"] == "cp1252"
    check_document(document)


def test_utf16_file_with_bom(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_bytes(codecs.BOM_UTF16_LE + "Line one\r\nLine two 你好\r\n".encode("utf-16-le"))
    document = process_file(path)
    assert document.content == "Line one\nLine two 你好\n"
    assert document.metadata["encoding"] == "utf-16-le"
    assert document.chunks[0].content == "Line one\nLine two 你好"


def test_unexpected_processor_error_is_wrapped(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(self: object, data: bytes, path: str) -> None:
        raise ZeroDivisionError("bad luck")

    monkeypatch.setattr(MarkdownProcessor, "extract", broken)
    with pytest.raises(IngestError) as info:
        process_bytes(b"# Title", "doc.md")
    assert info.value.path == "doc.md"
    assert info.value.reason == "ZeroDivisionError: bad luck"
    assert isinstance(info.value.__cause__, ZeroDivisionError)


def test_errors_pickle_with_their_class() -> None:
    error = UnsupportedSourceError("a.bin", "binary file")
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is UnsupportedSourceError
    assert (copy.path, copy.reason) == ("a.bin", "binary file")


def test_chunking_failure_keeps_one_chunk_r3_4(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(base_module, "annotate", broken)
    text = f"\n\n# Guide\n\n{LOREM * 10}\n\n## Part\n\n{LOREM * 10}\n"
    with caplog.at_level(logging.ERROR, logger=base_module.__name__):
        document = process_bytes(text.encode(), "guide.md")
    assert len(document.chunks) == 1
    assert document.chunks[0].content == text.strip()
    assert document.chunks[0].heading == "Guide"
    assert document.chunks[0].metadata == {"start_line": 3, "end_line": 9}
    assert "chunking guide.md failed" in caplog.text


# --------------------------------------------------------------------------- markdown and text


def test_markdown_front_matter_title_tags_and_metadata() -> None:
    text = (
        "---\n"
        'title: "Deploy Guide"\n'
        "tags: [ops, deploy]\n"
        "keywords:\n"
        "  - rollout\n"
        "  - ops\n"
        "author: Ann Lee\n"
        "draft: false\n"
        "version: 3\n"
        "---\n\n"
        f"# Something else\n\n{LOREM * 3}\n\n## Rollback\n\n{LOREM * 3}\n"
    )
    document = process_bytes(text.encode(), "docs/deploy.md")
    assert document.title == "Deploy Guide"
    assert document.tags == ["ops", "deploy", "rollout"]
    assert document.metadata["front_matter"] == {"author": "Ann Lee", "draft": False, "version": 3}
    assert (document.source_type, document.content_type) == ("markdown", "text/markdown")
    assert document.language is None
    assert document.content == text, "the front matter stays in the content"
    assert [c.heading for c in document.chunks][-1] == "Something else > Rollback"
    check_document(document)


@pytest.mark.parametrize(
    ("text", "title"),
    [
        ("Intro\n\n```\n# not a title\n```\n\n# Real Title\n\ntext", "Real Title"),
        ("## Only a second level\n\ntext", "Only a second level"),  # the first line
        ("---\nlayout: post\n---\n# From H1 ##\n", "From H1"),
        ("Intro.\n\nSetext Title\n============\n\ntext", "Setext Title"),
        ("# Lifespan Events { #lifespan-events }\n\ntext", "Lifespan Events"),
        ("plain words", "plain words"),
        ("```\n# code, not a title\n```\n", "install-notes"),  # no line of text: the file
    ],
)
def test_markdown_title_fallbacks(text: str, title: str) -> None:
    assert process_bytes(text.encode(), "x/install-notes.md").title == title


def test_front_matter_parsing_shapes() -> None:
    text = (
        "---\nname: x # comment\nlist: ['a, b', c]\nempty: []\nblock: |\n  line 1\n  line 2\n"
        "folded: >\n  one\n  two\nnested:\n  key: value\n---\nbody"
    )
    fields, end = parse_front_matter(text)
    assert fields == {
        "name": "x",
        "list": ["a, b", "c"],
        "empty": [],
        "block": "line 1\nline 2",
        "folded": "one two",
    }
    assert text[end:] == "body"
    assert parse_front_matter("---\n\nJust a rule\n---\n") == ({}, 0)
    assert parse_front_matter("no front matter") == ({}, 0)


def test_tags_as_comma_separated_string() -> None:
    document = process_bytes(b"---\ntags: a, b ,c\n---\ntext", "t.md")
    assert document.tags == ["a", "b", "c"]


def test_plain_text_title_is_the_stem() -> None:
    document = process_bytes(f"{LOREM * 30}".encode(), "/tmp/Meeting Notes.txt")
    assert document.title == "Meeting Notes"
    assert (document.source_type, document.content_type) == ("text", "text/plain")
    assert len(document.chunks) > 1
    check_document(document)


@pytest.mark.parametrize(
    ("name", "content_type", "source_type"),
    [
        ("settings.json", "application/json", "data"),
        ("deploy.yaml", "application/yaml", "data"),
        ("rows.csv", "text/csv", "data"),
        ("pyproject.toml", "application/toml", "data"),
        ("app.ini", "text/plain", "data"),
        ("feed.xml", "application/xml", "data"),
        ("server.log", "text/plain", "log"),
    ],
)
def test_data_and_log_files(name: str, content_type: str, source_type: str) -> None:
    lines = "\n".join(f'  "key_{i}": "value number {i}",' for i in range(200))
    document = process_bytes(lines.encode(), f"conf/{name}")
    assert document.title == name
    assert (document.content_type, document.source_type) == (content_type, source_type)
    assert len(document.chunks) > 1
    check_document(document)


def test_comments_in_data_files_are_not_headings() -> None:
    block = "# Database settings\ndb:\n  host: localhost\n  pool: 5\n\n"
    document = process_bytes((block * 60).encode(), "conf/app.yaml")
    assert len(document.chunks) > 1
    assert {chunk.heading for chunk in document.chunks} == {"app.yaml"}
    assert all(chunk.content.startswith("# Database") for chunk in document.chunks)
    check_document(document)


# --------------------------------------------------------------------------- reStructuredText

RST = f"""\
.. _top:

=================
 The Sphinx Guide
=================

{LOREM * 2}

Installation
============

{LOREM * 3}

On Linux
--------

{LOREM * 3}

Packages
~~~~~~~~

{LOREM * 3}

Usage
=====

Basics
------

{LOREM * 3}

.. code-block:: python

   x = 1

=====  =====
col a  col b
=====  =====
"""


def test_rst_headings_levels_in_order_of_appearance() -> None:
    headings = find_rst_headings(RST)
    assert [(h.text, h.level) for h in headings] == [
        ("The Sphinx Guide", 1),
        ("Installation", 2),
        ("On Linux", 3),
        ("Packages", 4),
        ("Usage", 2),
        ("Basics", 3),
    ]
    assert RST[headings[1].start : headings[1].end] == "Installation\n============"


def test_rst_chunks_carry_heading_paths() -> None:
    document = process_bytes(RST.encode(), "docs/guide.rst")
    assert document.title == "The Sphinx Guide"
    assert document.content_type == "text/x-rst"
    headings = [c.heading for c in document.chunks]
    assert headings == [
        "The Sphinx Guide",
        "The Sphinx Guide > Installation",
        "The Sphinx Guide > Installation > On Linux",
        "The Sphinx Guide > Installation > On Linux > Packages",
        "The Sphinx Guide > Usage > Basics",
    ]
    usage = document.chunks[-1]
    assert usage.content.startswith("Usage\n=====\n\nBasics"), "an empty section joins the next"
    assert "x = 1" in usage.content
    check_document(document)


def test_rst_without_titles_is_chunked_as_text() -> None:
    document = process_bytes(f"{LOREM}\n\n{LOREM}".encode(), "notes.rst")
    assert document.title == "notes"
    check_document(document)


# --------------------------------------------------------------------------- properties

markdown_fragments = st.sampled_from(
    [
        "# Title\n",
        "## Sub\n",
        "Setext\n======\n",
        "---\ntitle: x\n---\n",
        "```python\ndef f():\n    return 1\n```\n",
        "\n\n",
        "\r\n",
        "- item\n",
        LOREM,
        "如何重置密码？请打开设置页面。",
        "Title\n-----\n",
        "def g(x):\n    return x\n",
        "class K:\n    pass\n",
        "\ufeff",
    ]
)
documents = st.lists(st.one_of(markdown_fragments, st.text(max_size=40)), max_size=25).map("".join)
extensions = st.sampled_from([".md", ".txt", ".rst", ".py", ".js", ".go", ".html", ".json", ""])
small_configs = window_configs(
    st.builds(
        lambda min_size, extra: ChunkConfig(
            min_chunk_size=min_size, max_chunk_size=min_size + extra
        ),
        st.integers(1, 80),
        st.integers(0, 300),
    )
)


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=documents, extension=extensions, config=small_configs)
def test_processed_documents_hold_the_invariants(
    text: str, extension: str, config: ChunkConfig
) -> None:
    data = text.encode("utf-8")
    try:
        document = process_bytes(data, f"dir/file{extension}", config)
    except UnsupportedSourceError as error:
        assert error.reason in ("empty file", "binary file") or error.reason.startswith(
            "unrecognised text encoding: "
        )
        return
    check_document(document)
    for chunk in document.chunks:
        assert chunk_size(chunk.content, config) <= size_limit(config)


def test_opening_and_searching_never_import_the_pdf_and_html_parsers(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "from knowledge_agent import KnowledgeAgentCore\n"
        "with KnowledgeAgentCore(sys.argv[1]) as kb:\n"
        "    kb.add_text('Deploys freeze on Fridays.', title='Release policy')\n"
        "    assert kb.search('deploys friday')\n"
        "print(sorted(m for m in ('pypdf', 'bs4') if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "kb")],
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.strip() == "[]"


def test_a_sphinx_txt_file_keeps_its_sections_past_a_tilde_underline() -> None:
    sections = "\n\n".join(
        f"Part {n}\n~~~~~~\n\n" + f"Text of part {n}, long enough to be its own chunk. " * 4
        for n in range(1, 4)
    )
    data = f"=====\nGuide\n=====\n\n.. _guide:\n\nIntro with :ref:`a link <x>`.\n\n{sections}\n"
    document = process_bytes(data.encode(), "guide.txt")
    by_text = {c.heading for c in document.chunks if "Text of part 3" in c.content}
    assert by_text == {"Guide > Part 3"}, "a ~~~ underline is a title, not a code fence"
