"""URL normalisation: one spelling per fetchable URL, one key per page.

:func:`normalize_url` gives the URL the crawler fetches: scheme and host lower-case,
default port, fragment, credentials and tracking parameters gone, dot segments resolved,
percent-encoding in one canonical form, query parameters sorted. :func:`url_key` also
drops a trailing slash, so ``/guide`` and ``/guide/`` (which servers redirect between) are
one page. Both are idempotent; both raise ``ValueError`` for anything but an http(s) URL
with a host.
"""

from __future__ import annotations

import fnmatch
import ipaddress
import re
from collections.abc import Iterable
from urllib.parse import SplitResult, urljoin, urlsplit, urlunsplit

__all__ = [
    "anchor_url",
    "key_of_normalized",
    "matches_any",
    "normalize_url",
    "origin_of",
    "url_key",
]

_SCHEMES = frozenset({"http", "https"})
_DEFAULT_PORTS = {"http": 80, "https": 443}
_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
# Characters kept as they are (besides the unreserved ones); everything else is encoded.
_PATH_SAFE = frozenset("/:@!$&'()*+,;=")
_QUERY_SAFE = frozenset("/?:@!$'()*+,;")  # "&" and "=" split the query, so they are encoded
_HEX = frozenset("0123456789abcdefABCDEF")
_TRACKING = frozenset({"gclid", "fbclid", "msclkid", "mc_cid", "mc_eid", "_ga", "ref_src"})
# WHATWG URL parsing removes these anywhere in a URL: hrefs split over lines still work.
_STRIPPED = re.compile(r"[\t\n\r]")
_HOST = re.compile(r"^[a-z0-9_.-]+$")
# WHATWG strips C0 controls and spaces around a URL, not Unicode white space such as U+0085.
_EDGES = "".join(chr(code) for code in range(0x21))


def normalize_url(url: str, base: str | None = None) -> str:
    """The canonical spelling of ``url`` (resolved against ``base`` when given).

    Raises ``ValueError`` when the result is not an http(s) URL with a host.
    """
    text = _STRIPPED.sub("", url).strip(_EDGES)
    if base is not None:
        text = urljoin(_STRIPPED.sub("", base).strip(_EDGES), text)
    parts = urlsplit(text)
    scheme = parts.scheme.lower()
    if scheme not in _SCHEMES:
        raise ValueError(f"not an http(s) URL: {url!r}")
    netloc = _netloc(parts, scheme)
    path = _remove_dot_segments(_normalize_escapes(parts.path, _PATH_SAFE)) or "/"
    if not path.startswith("/"):
        path = "/" + path
    return urlunsplit((scheme, netloc, path, _normalize_query(parts.query), ""))


def url_key(url: str) -> str:
    """The identity of the page at ``url``: its normalised URL without a trailing slash
    (the root path ``/`` stays)."""
    return key_of_normalized(normalize_url(url))


def key_of_normalized(normalized: str) -> str:
    """:func:`url_key` of a URL :func:`normalize_url` returned (without normalising again)."""
    path, sep, query = normalized.partition("?")
    scheme_end = path.index("//") + 2
    if path.endswith("/") and path.find("/", scheme_end) < len(path) - 1:
        path = path.rstrip("/")
        if path.find("/", scheme_end) < 0:  # only slashes: the root path
            path += "/"
    return path + sep + query


def anchor_url(url: str, anchor: str | None) -> str:
    """``url#anchor`` (``url`` alone when there is no anchor)."""
    return f"{url}#{anchor}" if anchor else url


def origin_of(url: str) -> str:
    """``scheme://host[:port]`` of a normalised URL."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def matches_any(url: str, globs: Iterable[str]) -> bool:
    """Whether ``url`` matches one of the shell-style ``globs`` (case-sensitive)."""
    return any(fnmatch.fnmatchcase(url, glob) for glob in globs)


def _netloc(parts: SplitResult, scheme: str) -> str:
    # Credentials are dropped: a key must not carry a password into the database, and an
    # Authorization header (CrawlOptions.headers) is the way to log in.
    host = _normalize_host(parts.hostname or "", parts.netloc)
    port = parts.port  # raises ValueError for a port that is not a number in range
    if port is not None and port != _DEFAULT_PORTS[scheme]:
        return f"{host}:{port}"
    return host


def _normalize_host(host: str, netloc: str) -> str:
    if not host:
        raise ValueError(f"URL without a host: {netloc!r}")
    if ":" in host:  # an IPv6 literal (urlsplit removed the brackets)
        try:
            return f"[{ipaddress.IPv6Address(host.split('%')[0]).compressed}]"
        except ValueError:
            raise ValueError(f"bad IPv6 host: {host!r}") from None
    host = host.lower()
    if not host.isascii():
        try:
            host = host.encode("idna").decode("ascii")
        except UnicodeError:
            raise ValueError(f"host is not a valid international name: {host!r}") from None
    if not _HOST.match(host):
        raise ValueError(f"bad host: {host!r}")
    return host


def _normalize_query(query: str) -> str:
    pairs: list[tuple[str, str | None]] = []
    for field in query.split("&"):
        if not field:
            continue
        name, sep, value = field.partition("=")
        name = _normalize_escapes(name, _QUERY_SAFE)
        if _is_tracking(name):
            continue
        pairs.append((name, _normalize_escapes(value, _QUERY_SAFE | {"="}) if sep else None))
    # A stable sort: repeated names keep their order, which can carry meaning.
    pairs.sort(key=lambda pair: pair[0])
    return "&".join(name if value is None else f"{name}={value}" for name, value in pairs)


def _is_tracking(name: str) -> bool:
    lowered = name.lower()
    return lowered.startswith("utm_") or lowered in _TRACKING


def _normalize_escapes(text: str, safe: frozenset[str]) -> str:
    """Percent-encoding in one form: unreserved characters decoded, other escapes in
    upper case, a stray ``%`` and every character outside ``safe`` encoded (as UTF-8)."""
    if _is_plain(text, safe):
        return text  # the common case: nothing to decode or encode
    out: list[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char == "%" and _is_escape(text, i):
            decoded = chr(int(text[i + 1 : i + 3], 16))
            out.append(decoded if decoded in _UNRESERVED else "%" + text[i + 1 : i + 3].upper())
            i += 3
            continue
        if char in _UNRESERVED or char in safe:
            out.append(char)
        else:
            out.append("".join(f"%{byte:02X}" for byte in char.encode("utf-8", "surrogatepass")))
        i += 1
    return "".join(out)


_PLAIN = {
    _PATH_SAFE: re.compile(r"[A-Za-z0-9\-._~/:@!$&'()*+,;=]*"),
    _QUERY_SAFE: re.compile(r"[A-Za-z0-9\-._~/?:@!$'()*+,;]*"),
}


def _is_plain(text: str, safe: frozenset[str]) -> bool:
    """Whether ``text`` holds only unreserved and ``safe`` characters (so no escapes)."""
    pattern = _PLAIN.get(safe)
    return pattern is not None and pattern.fullmatch(text) is not None


def _is_escape(text: str, i: int) -> bool:
    return i + 2 < len(text) and text[i + 1] in _HEX and text[i + 2] in _HEX


def _remove_dot_segments(path: str) -> str:
    """RFC 3986 section 5.2.4, by segments."""
    if "." not in path:
        return path
    output: list[str] = []
    segments = path.split("/")
    for index, segment in enumerate(segments):
        last = index == len(segments) - 1
        if segment == ".":
            if last:
                output.append("")
        elif segment == "..":
            if len(output) > 1:
                output.pop()
            if last:
                output.append("")
        else:
            output.append(segment)
    result = "/".join(output)
    if path.startswith("/") and not result.startswith("/"):
        result = "/" + result
    return result
