"""PDF: text per page, page numbers on chunks, broken and encrypted files.

The PDFs are built here byte by byte (header, objects, cross-reference table with exact
offsets, trailer), so the tests need no PDF-writing library and no binary fixtures.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from pypdf import PdfReader, PdfWriter
from test_processors_support import check_document

from knowledge_agent.chunking import ChunkConfig
from knowledge_agent.errors import IngestError, UnsupportedSourceError
from knowledge_agent.processors import process_bytes, process_file


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")


def make_pdf(pages: list[list[str]], info: dict[str, str] | None = None) -> bytes:
    """A valid PDF 1.4: one page per entry, each line of text in 12 pt Helvetica.

    Objects: 1 catalog, 2 page tree, 3 font, then a page and its content stream per
    page, then the optional document information dictionary.
    """
    objects: list[bytes] = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        (
            f"<< /Type /Pages /Kids [{' '.join(f'{4 + 2 * i} 0 R' for i in range(len(pages)))}]"
            f" /Count {len(pages)} >>"
        ).encode(),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>",
    ]
    for number, lines in enumerate(pages):
        operators = ["BT", "/F1 12 Tf", "14 TL", "72 720 Td"]
        operators += [f"({_escape(line)}) Tj T*" for line in lines]
        operators.append("ET")
        stream = "\n".join(operators).encode("latin-1")
        objects.append(
            (
                "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792]"
                f" /Resources << /Font << /F1 3 0 R >> >> /Contents {5 + 2 * number} 0 R >>"
            ).encode()
        )
        objects.append(b"<< /Length %d >>\nstream\n%s\nendstream" % (len(stream), stream))
    info_entry = ""
    if info:
        entries = " ".join(f"/{key} ({_escape(value)})" for key, value in info.items())
        objects.append(f"<< {entries} >>".encode("latin-1"))
        info_entry = f" /Info {len(objects)} 0 R"
    out = bytearray(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += (
        f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R{info_entry} >>\n"
        f"startxref\n{xref}\n%%EOF\n"
    ).encode()
    return bytes(out)


def encrypt(data: bytes, user_password: str, owner_password: str = "owner") -> bytes:
    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(data)))
    writer.encrypt(user_password=user_password, owner_password=owner_password, algorithm="RC4-128")
    buffer = io.BytesIO()
    writer.write(buffer)
    return buffer.getvalue()


def filler(topic: str, count: int) -> list[str]:
    return [
        f"Line {i} of the {topic} section explains the {topic} procedure." for i in range(count)
    ]


PAGES = [
    ["Quarterly Operations Report", *filler("apple", 12)],
    ["Network section", *filler("banana", 12)],
    ["Storage section", *filler("cherry", 12)],
    ["Appendix", "The kiwi appendix lists every kiwi term.", *filler("kiwi", 3)],
]


@pytest.fixture(scope="module")
def report_pdf() -> bytes:
    return make_pdf(PAGES, {"Title": "Ops Report Q3", "Author": "Ann Lee"})


def test_the_generated_pdf_is_valid(report_pdf: bytes) -> None:
    reader = PdfReader(io.BytesIO(report_pdf), strict=True)
    assert len(reader.pages) == 4
    assert "banana" in reader.pages[1].extract_text()


def test_pages_titles_and_metadata(report_pdf: bytes, tmp_path: Path) -> None:
    path = tmp_path / "report.pdf"
    path.write_bytes(report_pdf)
    document = process_file(path)
    assert document.title == "Ops Report Q3"
    assert (document.source_type, document.content_type) == ("pdf", "application/pdf")
    assert document.metadata["page_count"] == 4
    assert document.metadata["author"] == "Ann Lee"
    pages = document.content.split("\n\n")
    assert pages[0].startswith("Quarterly Operations Report")
    assert pages[3].startswith("Appendix")
    check_document(document)


def test_chunks_carry_the_pages_they_touch(report_pdf: bytes) -> None:
    config = ChunkConfig(min_chunk_size=50, max_chunk_size=400)
    document = process_bytes(report_pdf, "report.pdf", config)
    assert len(document.chunks) > 8
    expected_page = {"apple": 1, "banana": 2, "cherry": 3, "kiwi": 4}
    for chunk in document.chunks:
        page, page_end = chunk.metadata["page"], chunk.metadata["page_end"]
        assert 1 <= page <= page_end <= 4
        touched = {number for word, number in expected_page.items() if word in chunk.content}
        assert touched, "every chunk holds text of some page"
        assert (min(touched), max(touched)) == (page, page_end)
    kiwi = [c for c in document.chunks if "kiwi appendix" in c.content]
    assert kiwi and kiwi[0].metadata["page"] == 4


def test_chunk_spanning_pages_has_page_end(report_pdf: bytes) -> None:
    document = process_bytes(report_pdf, "report.pdf", ChunkConfig(max_chunk_size=1500))
    spans = [(c.metadata["page"], c.metadata["page_end"]) for c in document.chunks]
    assert spans[0][0] == 1 and spans[-1][1] == 4
    assert all(page <= page_end for page, page_end in spans)


def test_title_falls_back_to_the_first_line() -> None:
    document = process_bytes(make_pdf([["  ", "First real line", "more"]]), "x/untitled.pdf")
    assert document.title == "First real line"
    assert "author" not in document.metadata


def test_truncated_pdf_is_an_ingest_error(report_pdf: bytes) -> None:
    with pytest.raises(IngestError) as info:
        process_bytes(report_pdf[: len(report_pdf) // 2], "cut.pdf")
    assert not isinstance(info.value, UnsupportedSourceError)
    assert info.value.path == "cut.pdf"
    assert info.value.reason.startswith("corrupt or truncated PDF")


def test_truncated_pdf_with_an_end_marker_is_an_ingest_error(report_pdf: bytes) -> None:
    # Gets past the end-marker check, so pypdf's own failure must be mapped.
    cut = report_pdf[: len(report_pdf) // 2] + b"\n%%EOF\n"
    with pytest.raises(IngestError, match="corrupt or truncated PDF") as info:
        process_bytes(cut, "cut.pdf")
    assert not isinstance(info.value, UnsupportedSourceError)


def test_trailing_junk_after_the_end_marker_is_tolerated(report_pdf: bytes) -> None:
    document = process_bytes(report_pdf + b"\n" + b"\x00" * 20000, "padded.pdf")
    assert document.metadata["page_count"] == 4


@pytest.mark.parametrize(
    "data",
    [
        b"%PDF-1.4\nnot really a pdf at all\n%%EOF\n",
        b"%PDF-1.7\n" + bytes(range(256)) * 8 + b"\n%%EOF",
        b"\x00\x01 garbage with a .pdf name",
    ],
)
def test_corrupt_pdf_is_an_ingest_error(data: bytes) -> None:
    with pytest.raises(IngestError, match="corrupt or truncated PDF") as info:
        process_bytes(data, "broken.pdf")
    assert not isinstance(info.value, UnsupportedSourceError)


def test_pdf_with_a_user_password_is_an_ingest_error(report_pdf: bytes) -> None:
    with pytest.raises(IngestError) as info:
        process_bytes(encrypt(report_pdf, "secret"), "locked.pdf")
    assert not isinstance(info.value, UnsupportedSourceError)
    assert info.value.reason == "encrypted PDF (password required)"


def test_pdf_encrypted_with_an_empty_user_password_opens(report_pdf: bytes) -> None:
    document = process_bytes(encrypt(report_pdf, ""), "owner-only.pdf")
    assert "banana" in document.content
    assert document.metadata["page_count"] == 4


def test_pdf_without_text_is_unsupported() -> None:
    with pytest.raises(UnsupportedSourceError, match=r"no extractable text \(scanned PDF\?\)"):
        process_bytes(make_pdf([[], []]), "scan.pdf")


def test_pdf_is_sniffed_without_extension(report_pdf: bytes) -> None:
    document = process_bytes(report_pdf, "downloads/report")
    assert document.source_type == "pdf"
