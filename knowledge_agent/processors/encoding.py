"""Bytes to text: byte-order marks, UTF-8, a best guess otherwise; binary detection.

:func:`decode_bytes` never raises: a file that is neither marked nor valid UTF-8 is
guessed (GB18030 for Chinese, cp1252 for Western text) and latin-1, which maps every
byte, is the last resort. Line ends are normalised to ``"\\n"`` so that offsets and line
numbers mean the same thing for every file.
"""

from __future__ import annotations

import codecs

__all__ = ["decode_bytes", "looks_binary", "normalize_newlines"]

# Longest first: the UTF-32 LE mark starts with the UTF-16 LE one.
_BOMS: tuple[tuple[bytes, str], ...] = (
    (codecs.BOM_UTF32_LE, "utf-32-le"),
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)
# Magic numbers of common binary formats whose first bytes may hold no NUL.
_BINARY_MAGIC = (
    b"\x89PNG",
    b"GIF8",
    b"\xff\xd8\xff",  # JPEG
    b"PK\x03\x04",  # zip, docx, xlsx, jar, wheel
    b"\x1f\x8b",  # gzip
    b"BZh",
    b"\xfd7zXZ",
    b"7z\xbc\xaf",
    b"\x7fELF",
    b"\xca\xfe\xba\xbe",
    b"SQLite format 3\x00",
    b"\x00\x00\x01\x00",  # ico
    b"wOFF",
    b"wOF2",
)
# Control bytes that do occur in text: tab, line feed, form feed, carriage return,
# backspace, vertical tab, escape (ANSI colours in logs).
_TEXT_CONTROLS = frozenset(b"\t\n\x0c\r\x08\x0b\x1b")
_MAX_CONTROL_RATIO = 0.05


def bom_encoding(data: bytes) -> str | None:
    """The encoding named by a leading byte-order mark, else ``None``."""
    for bom, name in _BOMS:
        if data.startswith(bom):
            return name
    return None


def looks_binary(head: bytes) -> bool:
    """Whether the first bytes of a file say it is not text.

    A byte-order mark means text (UTF-16 text is full of NUL bytes); otherwise a NUL
    byte, a known binary magic number or too many control characters mean binary.
    """
    if not head or bom_encoding(head) is not None:
        return False
    if b"\x00" in head or head.startswith(_BINARY_MAGIC):
        return True
    controls = sum(1 for byte in head if byte < 0x20 and byte not in _TEXT_CONTROLS)
    return controls > _MAX_CONTROL_RATIO * len(head)


def normalize_newlines(text: str) -> str:
    """``\\r\\n`` and lone ``\\r`` become ``\\n``."""
    return text.replace("\r\n", "\n").replace("\r", "\n")


def decode_bytes(data: bytes, *, declared: str | None = None) -> tuple[str, str]:
    """Decode ``data`` to text with normalised line ends; returns ``(text, encoding)``.

    Order: a byte-order mark (which is removed), strict UTF-8, the ``declared``
    encoding (e.g. an HTML ``<meta charset>``) if Python knows it, then a guess.
    Never raises.
    """
    name = bom_encoding(data)
    if name is not None:
        bom = 3 if name == "utf-8-sig" else (4 if name.startswith("utf-32") else 2)
        codec = "utf-8" if name == "utf-8-sig" else name
        return normalize_newlines(data[bom:].decode(codec, errors="replace")), name
    try:
        return normalize_newlines(data.decode("utf-8")), "utf-8"
    except UnicodeDecodeError:
        pass
    if declared:
        try:
            codec = codecs.lookup(declared).name
            return normalize_newlines(data.decode(codec)), codec
        except (LookupError, UnicodeDecodeError):
            pass
    return _guess(data)


def _guess(data: bytes) -> tuple[str, str]:
    """Decode text that is not UTF-8: GB18030 if it looks Chinese, else cp1252, else latin-1.

    GB18030 decodes almost any byte string, so it is only trusted when the non-ASCII
    bytes come in pairs (each Chinese character is two high bytes, whereas Western 8-bit
    text has lone accented letters between ASCII ones) and decode to common Chinese
    characters and punctuation rather than rare or private-use ones.
    """
    paired, single = _high_byte_runs(data)
    if paired and single * 4 <= paired:
        try:
            text = data.decode("gb18030")
        except UnicodeDecodeError:
            text = ""
        wide = [char for char in text if ord(char) >= 0x80]
        common = sum(1 for char in wide if _is_common_cjk(char))
        if wide and common >= 0.9 * len(wide):
            return normalize_newlines(text), "gb18030"
    try:
        return normalize_newlines(data.decode("cp1252")), "cp1252"
    except UnicodeDecodeError:  # cp1252 leaves five bytes undefined
        return normalize_newlines(data.decode("latin-1")), "latin-1"


def _high_byte_runs(data: bytes) -> tuple[int, int]:
    """Counts of runs of bytes >= 0x80 whose length is even (paired) or 1 (single)."""
    paired = single = 0
    run = 0
    for byte in data[:65536]:
        if byte >= 0x80:
            run += 1
            continue
        if run == 1:
            single += 1
        elif run and run % 2 == 0:
            paired += 1
        run = 0
    if run == 1:
        single += 1
    elif run and run % 2 == 0:
        paired += 1
    return paired, single


def _is_common_cjk(char: str) -> bool:
    """CJK ideographs, CJK punctuation and fullwidth forms: what Chinese text is made of."""
    code = ord(char)
    return 0x4E00 <= code <= 0x9FFF or 0x3000 <= code <= 0x303F or 0xFF00 <= code <= 0xFFEF
