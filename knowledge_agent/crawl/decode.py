"""Bodies decompressed a step at a time, so a small compressed bomb costs no memory.

httpx decodes ``Content-Encoding`` inside ``iter_bytes``: one 64 KiB network chunk of a
gzip bomb becomes ~64 MB before any size check can run. :class:`Decoder` is fed the raw
bytes instead and gives the decoded bytes in pieces of at most :data:`STEP`, so whoever
counts them stops within one step of its limit. It also unpacks a gzip file served as
such (a ``sitemap.xml.gz``).
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator

__all__ = ["ACCEPT_ENCODING", "STEP", "Decoder"]

STEP = 64 * 1024
"""The most decoded bytes one piece holds."""
ACCEPT_ENCODING = "gzip, deflate, identity"
"""What the crawler asks servers for: exactly what :class:`Decoder` can undo."""

_GZIP_WBITS = 16 + zlib.MAX_WBITS
_IDENTITY = frozenset({"", "identity"})
_GZIP = frozenset({"gzip", "x-gzip"})


class Decoder:
    """Undoes one content coding (``gzip``, ``x-gzip``, ``deflate``, ``identity`` or none).

    Raises ``ValueError`` for another coding (``br``, a list of codings) and, while
    decoding, for corrupt data. Concatenated gzip members are decoded one after another.
    """

    def __init__(self, encoding: str = "", *, step: int = STEP) -> None:
        coding = encoding.strip().lower()
        if coding not in _IDENTITY | _GZIP | {"deflate"}:
            raise ValueError(f"unsupported Content-Encoding {encoding.strip()!r}")
        self._coding = "" if coding in _IDENTITY else coding
        self._step = step
        self._inflater: zlib._Decompress | None = None
        if self._coding in _GZIP:
            self._inflater = zlib.decompressobj(_GZIP_WBITS)
        self._head: bytes | None = None
        if self._coding == "deflate":
            self._inflater = zlib.decompressobj(zlib.MAX_WBITS)
            self._head = b""

    def decode(self, data: bytes) -> Iterator[bytes]:
        """The decoded bytes of the next raw ``data``, in pieces of at most ``step`` bytes."""
        if self._inflater is None:
            for start in range(0, len(data), self._step):
                yield data[start : start + self._step]
            return
        try:
            yield from self._inflate(data)
        except zlib.error as exc:
            raise ValueError(f"bad {self._coding} data: {exc}") from None

    def _inflate(self, data: bytes) -> Iterator[bytes]:
        inflater = self._inflater
        assert inflater is not None
        if self._head is not None:  # "deflate": wrapped in zlib or not is still to tell
            data, self._head = self._head + data, None
            if len(data) < 2:
                self._head = data
                return
            if not _zlib_header(data):
                # Some servers send "deflate" without the zlib wrapper, as httpx accepts.
                inflater = self._inflater = zlib.decompressobj(-zlib.MAX_WBITS)
        # Each round either consumes input or gives a full step of output, so this ends:
        # on no input left and a short piece, or when the caller stops asking.
        while True:
            piece = inflater.decompress(data, self._step)
            if piece:
                yield piece
            if inflater.eof:
                rest = inflater.unused_data
                if not rest or self._coding not in _GZIP:
                    return  # bytes after the end of the stream are ignored, as httpx does
                inflater = self._inflater = zlib.decompressobj(_GZIP_WBITS)
                data = rest
                continue
            data = inflater.unconsumed_tail
            if not data and len(piece) < self._step:
                return


def _zlib_header(data: bytes) -> bool:
    """Whether ``data`` starts with a zlib header (RFC 1950: deflate, a valid check)."""
    return len(data) >= 2 and data[0] & 0x0F == 8 and (data[0] << 8 | data[1]) % 31 == 0
