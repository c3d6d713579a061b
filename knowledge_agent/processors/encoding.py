"""Bytes to text: byte-order marks, UTF-8, a best guess otherwise; binary detection.

:func:`decode_bytes` never raises: a file that is neither marked nor valid UTF-8 is
guessed (GB18030 for Chinese, cp1252 for Western text) and latin-1, which maps every
byte, is the last resort. UTF-16 and UTF-32 without a byte-order mark are recognised by
where their NUL bytes fall. Line ends are normalised to ``"\\n"`` so that offsets and line
numbers mean the same thing for every file.
"""

from __future__ import annotations

import codecs
import re

__all__ = [
    "binary_problem",
    "bom_encoding",
    "decode_bytes",
    "looks_binary",
    "normalize_newlines",
    "unmarked_utf_encoding",
]

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
# How much of a file the UTF-16/32 guess looks at, and how clean its decoding must be.
_UTF_SAMPLE = 4096
_UTF_CANDIDATES = ("utf-32-le", "utf-32-be", "utf-16-le", "utf-16-be")
# A sample with fewer non-ASCII bytes than this is Western text with accents, never garbled.
_MIN_HIGH_RATIO = 0.2
# An HTML or XML charset, a Python coding line: the file says what it is.
_DECLARED = re.compile(rb"(?i)charset|coding")


def bom_encoding(data: bytes) -> str | None:
    """The encoding named by a leading byte-order mark, else ``None``."""
    for bom, name in _BOMS:
        if data.startswith(bom):
            return name
    return None


def looks_binary(head: bytes) -> bool:
    """Whether the first bytes of a file say it is not text.

    A byte-order mark means text (UTF-16 text is full of NUL bytes), and so do NUL bytes
    laid out as UTF-16 or UTF-32 text lays them out; otherwise a NUL byte, a known binary
    magic number or too many control characters mean binary.
    """
    return binary_problem(head) is not None


def binary_problem(head: bytes) -> str | None:
    """Why the first bytes of a file are not text (``None`` when they are): what
    :func:`looks_binary` found, in words for a skip reason."""
    if not head or bom_encoding(head) is not None:
        return None
    if head.startswith(_BINARY_MAGIC):
        return "a binary file signature"
    if b"\x00" in head:
        if unmarked_utf_encoding(head) is not None:
            return None
        return "NUL bytes that are not laid out as UTF-16 or UTF-32 text"
    controls = sum(1 for byte in head if byte < 0x20 and byte not in _TEXT_CONTROLS)
    if controls > _MAX_CONTROL_RATIO * len(head):
        return "too many control characters"
    if _unrecognised_8bit(head):
        return "8-bit bytes that no recognised encoding turns into letters"
    return None


def _unrecognised_8bit(head: bytes) -> bool:
    """Whether mostly non-ASCII bytes, neither UTF-8 nor declared, guess to symbols rather
    than letters (EBCDIC, or a legacy encoding we cannot tell): text we would store garbled.

    Western 8-bit text has a few accented letters among ASCII ones, and Chinese is
    recognised by :func:`_guess`, so both pass.
    """
    high = sum(1 for byte in head if byte >= 0x80)
    if high < _MIN_HIGH_RATIO * len(head) or _DECLARED.search(head):
        return False
    try:
        head.decode("utf-8")
        return False
    except UnicodeDecodeError as exc:
        if exc.start >= len(head) - 3:  # a character cut by the end of the sample
            return False
    text, encoding = _guess(head)
    if encoding == "gb18030":
        return False
    wide = [char for char in text if ord(char) >= 0x80]
    return sum(char.isalpha() for char in wide) < 0.5 * len(wide)


def unmarked_utf_encoding(data: bytes) -> str | None:
    """UTF-32 or UTF-16 (LE or BE) text without a byte-order mark, recognised from its start.

    Text in these encodings has NUL bytes at fixed positions: the high byte of every
    ASCII character in UTF-16, the top two bytes of nearly every character in UTF-32. An
    encoding is taken when its NUL positions match, the sample decodes strictly, and the
    text has no NUL characters and few control characters; random binary data with NUL
    bytes fails one of these.
    """
    sample = data[:_UTF_SAMPLE]
    if b"\x00" not in sample:
        return None
    for name in _UTF_CANDIDATES:
        unit = 4 if name.startswith("utf-32") else 2
        usable = sample[: len(sample) - len(sample) % unit]
        if not usable or not _nul_layout_fits(usable, name):
            continue
        decoder = codecs.getincrementaldecoder(name)(errors="strict")
        try:
            # Not final unless it is the whole file: a pair cut at the end is no error.
            text = decoder.decode(usable, final=len(usable) == len(data))
        except UnicodeDecodeError:
            continue
        if text and _plausible_text(text):
            return name
    return None


def _nul_layout_fits(sample: bytes, name: str) -> bool:
    """Whether the NUL bytes of ``sample`` sit where ``name`` puts them for text."""
    little = name.endswith("-le")
    if name.startswith("utf-32"):
        units = len(sample) // 4
        # The top byte of a code point is always 0; the next one is 0 outside the
        # supplementary planes, so nearly always.
        top = sample[3::4] if little else sample[0::4]
        plane = sample[2::4] if little else sample[1::4]
        return top.count(0) == units and plane.count(0) >= 0.9 * units
    units = len(sample) // 2
    high = sample[1::2] if little else sample[0::2]
    low = sample[0::2] if little else sample[1::2]
    high_nuls, low_nuls = high.count(0), low.count(0)
    if low_nuls > max(1, units // 100):
        return False  # U+xx00 characters are rare; NULs on both sides are binary
    # Latin text: mostly ASCII, so most high bytes are NUL. Other scripts have fewer,
    # from spaces, digits and line ends; a longer sample is needed to trust them.
    return high_nuls >= 0.5 * units or (units >= 16 and high_nuls >= 0.05 * units)


def _plausible_text(text: str) -> bool:
    if "\x00" in text:
        return False
    controls = sum(1 for char in text if ord(char) < 0x20 and ord(char) not in _TEXT_CONTROLS)
    if controls > _MAX_CONTROL_RATIO * len(text):
        return False
    # Private-use and unassigned code points are what binary data decodes to, not text.
    odd = sum(
        1
        for char in text
        if 0xE000 <= ord(char) <= 0xF8FF or ord(char) >= 0xF0000 or _is_noncharacter(char)
    )
    return odd <= _MAX_CONTROL_RATIO * len(text)


def _is_noncharacter(char: str) -> bool:
    code = ord(char)
    return 0xFDD0 <= code <= 0xFDEF or code & 0xFFFE == 0xFFFE


def normalize_newlines(text: str) -> str:
    """``\\r\\n`` and lone ``\\r`` become ``\\n``."""
    return text.replace("\r\n", "\n").replace("\r", "\n")


def decode_bytes(data: bytes, *, declared: str | None = None) -> tuple[str, str]:
    """Decode ``data`` to text with normalised line ends; returns ``(text, encoding)``.

    Order: a byte-order mark (which is removed), UTF-16 / UTF-32 recognised by their NUL
    bytes, strict UTF-8, the ``declared`` encoding (e.g. an HTML ``<meta charset>``) if
    Python knows it, then a guess. Never raises.
    """
    name = bom_encoding(data)
    if name is not None:
        bom = 3 if name == "utf-8-sig" else (4 if name.startswith("utf-32") else 2)
        codec = "utf-8" if name == "utf-8-sig" else name
        return normalize_newlines(data[bom:].decode(codec, errors="replace")), name
    # Before UTF-8: ASCII in UTF-16 is valid UTF-8 too, full of NUL characters.
    name = unmarked_utf_encoding(data)
    if name is not None:
        return normalize_newlines(data.decode(name, errors="replace")), name
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
