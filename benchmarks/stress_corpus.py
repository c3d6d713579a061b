"""Generated input for the stress harness: files that each carry one unique token, edits that
swap the token, and the bad files of the bad-input scenario.

A token is a family prefix (``tok`` files, ``ted`` edits, ``twr`` writes) + four letters + ``q``
(``tokaaabq``): letters only, so the analyzer keeps it as one term; the final ``q`` keeps the
stemmer off it (no two tokens share a stem) and no filler word ends in ``q``.
"""

from __future__ import annotations

import os
import random
import re
import string
from dataclasses import dataclass
from pathlib import Path

TOKEN_RE = re.compile(r"\bt(?:ok|ed|wr)[a-z]{4}q\b")
_LETTERS = string.ascii_lowercase


def token(number: int, prefix: str = "tok") -> str:
    """The unique word planted in file ``number``; ``prefix`` separates families of tokens
    (``tok`` for files, others for writes and edits) so they never collide."""
    letters = []
    for _ in range(4):
        number, digit = divmod(number, 26)
        letters.append(_LETTERS[digit])
    if number:
        raise ValueError("token numbers stop at 26**4")
    return f"{prefix}{''.join(reversed(letters))}q"


def tokens_in(text: str) -> list[str]:
    """The planted tokens a stored text carries."""
    return TOKEN_RE.findall(text)


def _vocabulary(rng: random.Random, size: int = 3000) -> list[str]:
    """Pronounceable filler words; none matches a token (they never start with ``tok``)."""
    consonants, vowels = "bcdfghjklmnprstvwz", "aeiou"
    words: set[str] = set()
    while len(words) < size:
        syllables = rng.randint(1, 4)
        word = "".join(rng.choice(consonants) + rng.choice(vowels) for _ in range(syllables))
        if not word.startswith("tok"):
            words.add(word)
    return sorted(words)


class TextMaker:
    """Seeded filler text: headings and paragraphs of vocabulary words."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.words = _vocabulary(self.rng)

    def sentence(self) -> str:
        words = self.rng.choices(self.words, k=self.rng.randint(6, 18))
        return " ".join(words).capitalize() + "."

    def paragraph(self) -> str:
        return " ".join(self.sentence() for _ in range(self.rng.randint(2, 6)))

    def document(self, title: str, planted: str, target_bytes: int) -> str:
        """Markdown of about ``target_bytes``: the token sits in one paragraph in the middle."""
        parts = [f"# {title}", ""]
        size = 0
        paragraphs: list[str] = []
        while size < target_bytes:
            if paragraphs and self.rng.random() < 0.2:
                paragraphs.append(f"## {self.sentence()[:-1]}")
            paragraphs.append(self.paragraph())
            size += len(paragraphs[-1]) + 2
        middle = len(paragraphs) // 2
        paragraphs.insert(middle, f"The marker word is {planted} here. {self.sentence()}")
        parts.extend("\n\n".join(paragraphs).split("\n"))
        return "\n".join(parts) + "\n"

    def size(self) -> int:
        """Mostly small files with a long tail, like a notes folder: 200 B to 20 KB (about
        1 KB on average)."""
        return int(min(20_000, max(200, self.rng.lognormvariate(6.5, 0.9))))


@dataclass(frozen=True)
class Corpus:
    """A generated folder: ``paths[n]`` carries ``token(n)``."""

    root: Path
    paths: list[Path]
    total_bytes: int

    def tokens(self) -> dict[Path, str]:
        return {path: token(n) for n, path in enumerate(self.paths)}


def write_corpus(root: Path, files: int, seed: int = 0) -> Corpus:
    """``files`` Markdown and text files in sub-folders of 100, each with its own token."""
    maker = TextMaker(seed)
    paths = []
    total = 0
    for n in range(files):
        folder = root / f"part{n // 100:02d}"
        folder.mkdir(parents=True, exist_ok=True)
        suffix = ".txt" if n % 5 == 4 else ".md"
        path = folder / f"note{n:05d}{suffix}"
        text = maker.document(f"Note {n}", token(n), maker.size())
        path.write_text(text, encoding="utf-8")
        total += len(text)
        paths.append(path)
    return Corpus(root, paths, total)


def edit_files(paths: list[Path], trial: int, prefix: str = "ted") -> dict[Path, str]:
    """Replace the token of each file with a new one (``prefix`` + its trial and index) and
    move its mtime forward; returns each file's token now."""
    edited = {}
    for index, path in enumerate(paths):
        new = token(trial * len(paths) + index, prefix)
        text = TOKEN_RE.sub(new, path.read_text(encoding="utf-8"))
        path.write_text(text + f"\nEdited in trial {trial}.\n", encoding="utf-8")
        stat = path.stat()
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + (trial + 1) * 10**9))
        edited[path] = new
    return edited


# -- bad input ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class BadFile:
    """One bad file: its path (bytes, since one name is not UTF-8) and the token it carries,
    which shows whether its text came through intact when it was indexed instead of refused."""

    kind: str
    path: bytes
    planted: str


def _nested_html(planted: str, depth: int) -> bytes:
    return ("<div>" * depth + f"<p>deep {planted}</p>" + "</div>" * depth).encode()


def _big_html(maker: TextMaker, planted: str, megabytes: int) -> bytes:
    paragraphs = [f"<p>{maker.paragraph()}</p>" for _ in range(400)]
    block = "\n".join(paragraphs)
    copies = max(1, megabytes * 1_000_000 // len(block))
    middle = copies // 2
    body = [block] * copies
    body.insert(middle, f"<p>The marker word is {planted}.</p>")
    return ("<html><head><title>Big</title></head><body>" + "\n".join(body)).encode() + (
        b"</body></html>"
    )


def _broken_pdf(planted: str) -> bytes:
    # A PDF header and a content stream, then nothing: no xref table, no trailer.
    return (
        b"%PDF-1.7\n1 0 obj\n<< /Type /Catalog /Pages 2 0 R >>\nendobj\n"
        b"4 0 obj\n<< /Length 44 >>\nstream\nBT /F1 12 Tf 72 712 Td ("
        + planted.encode()
        + b") Tj ET\nendstream\nendobj\nxref\n0 5\n0000000000 65535 f \n0000000\x00\x13garbage"
    )


def _unknown_encoding(maker: TextMaker, planted: str) -> bytes:
    # EBCDIC (cp500): every byte is valid Latin-1, so only the meaning tells it is wrong.
    return f"{maker.paragraph()} The marker word is {planted}. {maker.paragraph()}".encode("cp500")


BAD_KINDS = (
    "name_xff",
    "html_nested_10000",
    "html_large",
    "utf16_no_bom",
    "utf32_no_bom",
    "pdf_broken",
    "unknown_encoding",
)


def write_bad_case(
    folder: Path, kind: str, good: int, seed: int, html_megabytes: int = 20
) -> tuple[list[Path], BadFile]:
    """``good`` good Markdown files and one bad file of ``kind`` in ``folder``."""
    maker = TextMaker(seed)
    folder.mkdir(parents=True, exist_ok=True)
    goods = []
    for n in range(good):
        path = folder / f"good{n:02d}.md"
        path.write_text(maker.document(f"Good {n}", token(n), 800), encoding="utf-8")
        goods.append(path)
    planted = token(500 + BAD_KINDS.index(kind), "bad")
    text = f"{maker.paragraph()} The marker word is {planted}. {maker.paragraph()}\n"
    name, data = {
        "name_xff": (b"bad\xffname.md", text.encode()),
        "html_nested_10000": (b"nested.html", _nested_html(planted, 10_000)),
        "html_large": (b"big.html", _big_html(maker, planted, html_megabytes)),
        "utf16_no_bom": (b"utf16.txt", text.encode("utf-16-le")),
        "utf32_no_bom": (b"utf32.txt", text.encode("utf-32-le")),
        "pdf_broken": (b"broken.pdf", _broken_pdf(planted)),
        "unknown_encoding": (b"ebcdic.txt", _unknown_encoding(maker, planted)),
    }[kind]
    path = os.fsencode(folder) + b"/" + name
    with open(path, "wb") as handle:
        handle.write(data)
    return goods, BadFile(kind, path, planted)
