"""Text analysis shared by every engine: one definition of what a *term* is.

The Whoosh schema (through :meth:`TextAnalyzer.whoosh_analyzer`), the TF-IDF vectorizer
(``TfidfVectorizer(analyzer=TextAnalyzer())``) and every query go through the same
:class:`TextAnalyzer`, so a document and a query can never disagree about tokenization.
Whoosh's ``StandardAnalyzer`` and scikit-learn's default ``token_pattern`` both treat a run
of Chinese characters as one token (重置密码 never matches 如何重置密码); this module does not.

Rules, for documents and queries alike:

* **Words** are Unicode ``\\w`` runs (numbers included, combining marks kept inside the word),
  NFC-normalised and case-folded; fullwidth ASCII (``Ｐｙｔｈｏｎ３``) is read as ASCII.
* **Latin-script words** lose English stopwords (``whoosh.analysis.STOP_WORDS`` by default)
  and are stemmed with the Porter algorithm (see :func:`porter_stem`); a word shorter than
  ``min_length`` or longer than ``max_length`` (measured before stemming) is dropped. Words in
  other alphabetic scripts are case-folded but not stemmed.
* **Code identifiers** (``getUserName``, ``HTTPServer``, ``snake_case_name``, ``os.path.join``)
  give the whole identifier, case-folded and *not* stemmed, so an exact name matches exactly;
  then every part split on dots, underscores, camelCase and letter/digit boundaries, each
  going through the word rules above. A purely alphabetic whole whose stem differs is also
  emitted stemmed, because its lowercase spelling in a query (``getusername``) is a plain
  word and plain words are stemmed. ``HTTPServer`` → ``httpserver http server``;
  ``getUserName`` → ``getusername getusernam get user name``; ``snake_case_name`` →
  ``snake_case_name snake case name``; ``os.path.join`` → ``os.path.join os path join``.
  A plain word (``running``) is only its stem; a word with a leading or trailing underscore
  (``_emphasis_``, ``__init__``) is just that word; a plural acronym (``APIs``) is one word;
  a hexadecimal hash is kept whole and not split. A segment longer than ``max_length`` is a
  blob (base64, minified code) and is dropped, except that the parts of a long snake_case
  name are still indexed.
* **CJK runs** (Han, Hiragana, Katakana, Hangul) are split out of mixed text
  (``Python教程`` → ``python 教程``) and give overlapping character bigrams
  (如何重置密码 → 如何 何重 重置 置密 密码); a one-character run gives that character. No
  stopwords, stemming or length limits apply. With ``cjk="jieba"`` the runs are segmented by
  jieba's search mode instead (the optional ``[cjk]`` extra).

Every emitted term gets the next position (0, 1, 2, … with no gaps for stopwords), so the
parts of an identifier and consecutive CJK bigrams are adjacent for phrase queries, and the
character offsets of the source span it came from, for highlighting.

``terms()`` is the hot path: one pass of one compiled regular expression, then one dict
lookup per token in a bounded per-instance cache that maps a raw token to its final terms
(so stemming, stopword and identifier analysis run once per distinct token). The module
keeps no mutable global state.
"""

from __future__ import annotations

import functools
import operator
import re
import unicodedata
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, fields
from typing import Any

from whoosh.analysis import STOP_WORDS as _WHOOSH_STOP_WORDS
from whoosh.analysis import Analyzer as _WhooshAnalyzerBase
from whoosh.analysis import Token as _WhooshToken

from knowledge_agent.errors import ConfigError
from knowledge_agent.extras import missing_extra

__all__ = [
    "CJK_CHARACTERS",
    "DEFAULT_STOP_WORDS",
    "AnalyzerConfig",
    "TextAnalyzer",
    "Token",
    "WhooshTextAnalyzer",
    "detect_language",
    "has_inner_markup",
    "highlight",
    "highlight_terms",
    "matched_spans",
    "porter_stem",
]

DEFAULT_STOP_WORDS: frozenset[str] = frozenset(_WHOOSH_STOP_WORDS)
"""Whoosh's English stop words, the default :attr:`AnalyzerConfig.stopwords`."""

_CJK_MODES = ("bigram", "jieba")

# --------------------------------------------------------------------------- character classes

_HAN = "\u3005-\u3007\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U000323af"
_KANA = "\u3041-\u309f\u30a1-\u30fa\u30fc-\u30ff\u31f0-\u31ff\uff66-\uff9f"
_HANGUL = "\u1100-\u11ff\u3131-\u318e\ua960-\ua97f\uac00-\ud7a3\ud7b0-\ud7ff\uffa0-\uffdc"
_CJK = _HAN + _KANA + _HANGUL
CJK_CHARACTERS = _CJK
"""Han, Kana and Hangul as the body of a regular-expression character class."""


def _mark_class() -> str:
    """Combining marks (Mn/Mc/Me) of the living scripts, as a regex character-class body.

    Python's ``\\w`` excludes combining marks, which would cut हिन्दी or decomposed ``café``
    into pieces; the word pattern lets marks continue a word. Built once at import (~1 ms).
    """
    parts: list[str] = []
    for lo, hi in ((0x0300, 0x2000), (0x20D0, 0x2100), (0xA670, 0xAC00), (0xFE20, 0xFE30)):
        start = -1
        for cp in range(lo, hi + 1):
            is_mark = cp < hi and unicodedata.category(chr(cp)).startswith("M")
            if is_mark and start < 0:
                start = cp
            elif not is_mark and start >= 0:
                parts.append(f"\\u{start:04x}-\\u{cp - 1:04x}")
                start = -1
    return "".join(parts)


_MARKS = _mark_class()
_W = f"[^\\W{_CJK}]"  # a word character that is not CJK
_PLAIN_WORD = f"{_W}+(?:[{_MARKS}]+{_W}*)*"
# One pass: a CJK run, or a word optionally continued by ".word" (dotted names, versions).
_TOKEN_RE = re.compile(f"[{_CJK}]+|{_PLAIN_WORD}(?:\\.{_PLAIN_WORD})*")
# Markup inside a word: a mnemonic bracket (E[x]tract, [c]reate, g[z]ipped) or bold
# (**E**xtract; not a single *, which is multiplication in code). It joins the word only
# where a word character follows it, so an index (args[0]) or a glob ([ch]) stays apart.
_INNER_MARKUP = f"(?:\\[{_W}+\\]|\\*{{2,3}}{_W}+\\*{{2,3}})"
_MARKED_WORD = f"{_INNER_MARKUP}*{_PLAIN_WORD}(?:{_INNER_MARKUP}+{_PLAIN_WORD})*"
# The same with marked words; a third slower, so used only on a text that has such markup.
_MARKED_TOKEN_RE = re.compile(f"[{_CJK}]+|{_MARKED_WORD}(?:\\.{_MARKED_WORD})*")
_MARKED_BRACKET_RE = re.compile(f"\\]{_W}")
_MARKED_BOLD_RE = re.compile(f"\\*\\*{_W}+\\*\\*{_W}")
_MARKUP_CHARS_RE = re.compile(r"[\[\]*]")
# _TOKEN_RE on an ASCII text: there a word character is [A-Za-z0-9_] and no mark or CJK
# character can occur, so the same tokens come from a plain ASCII class, 2.5 times faster.
_ASCII_TOKEN_RE = re.compile(r"[A-Za-z0-9_]+(?:\.[A-Za-z0-9_]+)*")


def _token_re(text: str) -> re.Pattern[str]:
    """The token pattern for ``text``: marked words if it has inner markup, else the plain
    word pattern (its ASCII form for an ASCII text)."""
    if has_inner_markup(text):
        return _MARKED_TOKEN_RE
    return _ASCII_TOKEN_RE if text.isascii() else _TOKEN_RE


def has_inner_markup(text: str) -> bool:
    """Whether ``text`` has markup inside a word (``E[x]tract``, ``**E**xtract``): such a text
    is tokenized with the marked-word pattern, as a whole."""
    return bool(
        ("]" in text and _MARKED_BRACKET_RE.search(text))
        or ("**" in text and _MARKED_BOLD_RE.search(text))
    )


_CJK_CHAR_RE = re.compile(f"[{_CJK}]")
_SEGMENT_RE = re.compile(r"[^.]+")
_UNDERSCORE_SPLIT_RE = re.compile(r"[^_]+")
# camelCase parts of a mixed-case piece: plural acronym (APIs), acronym before a capitalised
# word (HTTP|Server), capitalised or lower word, all-caps run, digits.
_CASE_PART_RE = re.compile(r"[A-Z]{2,}s(?![a-z])|[A-Z]+(?=[A-Z][a-z])|[A-Z]?[^A-Z\d]+|[A-Z]+|\d+")
_DIGIT_PART_RE = re.compile(r"\d+|\D+")
_HEX_RE = re.compile(r"[0-9a-fA-F]{12,}")
_FULLWIDTH = {cp: cp - 0xFEE0 for cp in range(0xFF01, 0xFF5F)}

_CACHE_LIMIT = 1 << 18  # distinct raw tokens remembered per analyzer before the cache resets
_CJK_CACHE_MAX_RUN = 8  # longer CJK runs rarely repeat: not worth caching

_Span = tuple[str, int, int]  # (term, start, end) relative to the analysed piece


# --------------------------------------------------------------------------- stemming
#
# The Porter algorithm, adapted from whoosh.lang.porter (BSD licence). Whoosh's own copy calls
# re.match where the algorithm needs a search in step 1b, so "running" stems to "runn" and
# "activated" to "activat" (850 of 24,000 SQuAD + Cranfield words differ from Snowball's
# reference Porter; 53 differ here, all in the known "-logi"/two-letter variants). Whoosh's
# porter2 has bugs of its own ("added" → "ad") and is five times slower; PyStemmer would be a
# compiled dependency, and stems must not depend on what happens to be installed, since the
# index stores them.

_STEP2 = {
    "ational": "ate", "tional": "tion", "enci": "ence", "anci": "ance", "izer": "ize",
    "bli": "ble", "alli": "al", "entli": "ent", "eli": "e", "ousli": "ous", "ization": "ize",
    "ation": "ate", "ator": "ate", "alism": "al", "iveness": "ive", "fulness": "ful",
    "ousness": "ous", "aliti": "al", "iviti": "ive", "biliti": "ble", "logi": "log",
}  # fmt: skip
_STEP3 = {
    "icate": "ic", "ative": "", "alize": "al", "iciti": "ic", "ical": "ic", "ful": "", "ness": "",
}  # fmt: skip
_C = "[^aeiou][^aeiouy]*"  # a consonant sequence
_V = "[aeiouy][aeiou]*"  # a vowel sequence
_MGR0 = re.compile(f"^(?:{_C})?{_V}{_C}")  # measure > 0
_MEQ1 = re.compile(f"^(?:{_C})?{_V}{_C}(?:{_V})?$")  # measure == 1
_MGR1 = re.compile(f"^(?:{_C})?{_V}{_C}{_V}{_C}")  # measure > 1
_HAS_VOWEL = re.compile(f"^(?:{_C})?[aeiouy]")
_CVC = re.compile(f"^{_C}[aeiouy][^aeiouwxy]$")
_ED_ING = re.compile(r"^(.+?)(?:ed|ing)$")
_AT_BL_IZ = re.compile(r"(?:at|bl|iz)$")
_DOUBLE = re.compile(r"([^aeiouylsz])\1$")
_S2 = re.compile("^(.+?)(" + "|".join(_STEP2) + ")$")
_S3 = re.compile("^(.+?)(" + "|".join(_STEP3) + ")$")
_S4 = re.compile(
    r"^(.+?)(?:al|ance|ence|er|ic|able|ible|ant|ement|ment|ent|ou|ism|ate|iti|ous|ive|ize)$"
)
_S4_ION = re.compile(r"^(.+?[st])ion$")
_S5 = re.compile(r"^(.+?)e$")


# A pure function, remembered across analyzers: each knowledge base opened in a process
# (a test suite's fixtures) would otherwise stem the same words again.
@functools.lru_cache(maxsize=1 << 16)
def porter_stem(word: str) -> str:
    """Porter-stem a lowercase English word (``running``, ``runs`` → ``run``)."""
    w = word
    if len(w) < 3:
        return w
    first_y = w[0] == "y"
    if first_y:
        w = "Y" + w[1:]
    # step 1a: plurals
    if w.endswith(("sses", "ies")):
        w = w[:-2]
    elif w.endswith("s") and not w.endswith("ss"):
        w = w[:-1]
    # step 1b: -eed, -ed, -ing
    if w.endswith("eed"):
        if _MGR0.match(w[:-3]):
            w = w[:-1]
    else:
        m = _ED_ING.match(w)
        if m and _HAS_VOWEL.match(m.group(1)):
            w = m.group(1)
            if _AT_BL_IZ.search(w):
                w += "e"
            elif _DOUBLE.search(w):
                w = w[:-1]
            elif _CVC.match(w):
                w += "e"
    # step 1c: y → i
    if w.endswith("y") and _HAS_VOWEL.match(w[:-1]):
        w = w[:-1] + "i"
    # steps 2 and 3: double and single suffixes
    m = _S2.match(w)
    if m and _MGR0.match(m.group(1)):
        w = m.group(1) + _STEP2[m.group(2)]
    m = _S3.match(w)
    if m and _MGR0.match(m.group(1)):
        w = m.group(1) + _STEP3[m.group(2)]
    # step 4: -ant, -ence, …
    m = _S4.match(w) or _S4_ION.match(w)
    if m and _MGR1.match(m.group(1)):
        w = m.group(1)
    # step 5: final -e and -ll
    m = _S5.match(w)
    if m:
        stem = m.group(1)
        if _MGR1.match(stem) or (_MEQ1.match(stem) and not _CVC.match(stem)):
            w = stem
    if w.endswith("ll") and _MGR1.match(w):
        w = w[:-1]
    if first_y:
        w = "y" + w[1:]
    return w


# --------------------------------------------------------------------------- configuration


@dataclass(frozen=True, kw_only=True)
class AnalyzerConfig:
    """How text becomes terms. Immutable, comparable and hashable.

    ``stopwords`` are case-folded on construction; any iterable of strings is accepted.
    Invalid values raise :class:`~knowledge_agent.errors.ConfigError` naming the field.
    """

    stem: bool = True
    stopwords: frozenset[str] = field(default=DEFAULT_STOP_WORDS)
    cjk: str = "bigram"
    split_identifiers: bool = True
    min_length: int = 1
    max_length: int = 64

    def __post_init__(self) -> None:
        for name in ("stem", "split_identifiers"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(
                    f"AnalyzerConfig.{name} must be True or False, got {getattr(self, name)!r}"
                )
        if self.cjk not in _CJK_MODES:
            raise ConfigError(f"AnalyzerConfig.cjk must be 'bigram' or 'jieba', got {self.cjk!r}")
        for name in ("min_length", "max_length"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"AnalyzerConfig.{name} must be an integer >= 1, got {value!r}")
        if self.max_length < self.min_length:
            raise ConfigError(
                f"AnalyzerConfig.max_length ({self.max_length}) must be >= "
                f"min_length ({self.min_length})"
            )
        words = self.stopwords
        if isinstance(words, (str, bytes)) or not isinstance(words, Iterable):
            raise ConfigError(
                f"AnalyzerConfig.stopwords must be a set of strings, got {type(words).__name__}"
            )
        words = tuple(words)
        if not all(isinstance(w, str) for w in words):
            raise ConfigError("AnalyzerConfig.stopwords must contain only strings")
        object.__setattr__(self, "stopwords", frozenset(w.casefold() for w in words))

    def to_dict(self) -> dict[str, Any]:
        """Plain, JSON-friendly form (stopwords as a sorted list)."""
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["stopwords"] = sorted(self.stopwords)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AnalyzerConfig:
        """Inverse of :meth:`to_dict`; unknown keys (from a newer version) are ignored."""
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


@dataclass(frozen=True, slots=True)
class Token:
    """One index term and the source span it came from: ``text[start:end]``."""

    text: str
    start: int
    end: int
    position: int


# --------------------------------------------------------------------------- helpers


def _coerce(text: object) -> str:
    if isinstance(text, str):
        return text
    if text is None:
        return ""
    if isinstance(text, (bytes, bytearray)):
        return bytes(text).decode("utf-8", "replace")
    raise TypeError(f"expected str, got {type(text).__name__}")


def _is_plain_word(tok: str) -> bool:
    """ASCII letters, lowercase, uppercase or capitalised: one term, the word's stem."""
    return tok.isascii() and tok.isalpha() and (tok.islower() or tok.isupper() or tok[1:].islower())


def _fold(word: str) -> str:
    if word.isascii():
        return word.lower()
    return unicodedata.normalize("NFC", word).casefold()


def _bigrams(run: str) -> list[str]:
    if len(run) == 1:
        return [run]
    return list(map(operator.add, run, run[1:]))


def _bigram_spans(run: str) -> tuple[_Span, ...]:
    if len(run) == 1:
        return ((run, 0, 1),)
    return tuple((run[i : i + 2], i, i + 2) for i in range(len(run) - 1))


def _load_jieba() -> Callable[..., Iterable[tuple[str, int, int]]]:
    try:
        import jieba  # optional extra, imported only when configured
    except ImportError as exc:
        raise ConfigError(missing_extra("AnalyzerConfig.cjk='jieba' (jieba)", "cjk")) from exc
    return jieba.tokenize


# --------------------------------------------------------------------------- the analyzer


class _ByConfig:
    """Equality, hashing, repr and pickled state come from ``config`` alone (caches are rebuilt)."""

    config: AnalyzerConfig

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.config!r})"

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.config == self.config  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash((type(self).__name__, self.config))

    def __getstate__(self) -> dict[str, Any]:
        return {"config": self.config.to_dict()}


_TokenCaches = tuple[
    dict[str, tuple[str, ...]], dict[str, tuple[_Span, ...]], dict[str, tuple[_Span, ...]]
]
# Token caches shared by the analyzers of one configuration: a token's terms are a pure
# function of the token and the configuration, and a process that opens many knowledge bases
# (a test suite's fixtures) would otherwise analyse the same words again for each.
_SHARED_CACHES: dict[AnalyzerConfig, _TokenCaches] = {}
_SHARED_CONFIGS = 8  # configurations whose caches are kept


def _caches_for(config: AnalyzerConfig) -> _TokenCaches:
    caches = _SHARED_CACHES.get(config)
    if caches is None:
        if len(_SHARED_CACHES) >= _SHARED_CONFIGS:
            _SHARED_CACHES.pop(next(iter(_SHARED_CACHES)), None)
        caches = _SHARED_CACHES[config] = ({}, {}, {})
    return caches


class TextAnalyzer(_ByConfig):
    """Turns text into index terms; the one tokenizer of both engines and of queries.

    Callable (``analyzer(text) -> list[str]``), so an instance can be passed as
    ``TfidfVectorizer(analyzer=...)`` or ``HashingVectorizer(analyzer=...)``. Pickles as its
    configuration only (caches are rebuilt). Safe to share between threads.
    """

    def __init__(self, config: AnalyzerConfig | None = None) -> None:
        if config is None:
            config = AnalyzerConfig()
        elif not isinstance(config, AnalyzerConfig):
            raise ConfigError(f"TextAnalyzer needs an AnalyzerConfig, got {type(config).__name__}")
        self.config = config
        self._stops = config.stopwords
        self._stem = config.stem
        self._split = config.split_identifiers
        self._min = config.min_length
        self._max = config.max_length
        self._jieba = _load_jieba() if config.cjk == "jieba" else None
        self._terms_cache, self._spans_cache, self._segment_cache = _caches_for(config)

    # -- public API -------------------------------------------------------------------------

    def terms(self, text: str) -> list[str]:
        """The index terms of ``text`` in order. Never raises on a string; ``[]`` if blank."""
        text = _coerce(text)
        get = self._terms_cache.get
        miss = self._terms_miss
        out: list[str] = []
        for tok in _token_re(text).findall(text):
            found = get(tok)
            if found is None:
                found = miss(tok)
            out += found
        return out

    __call__ = terms

    def tokens(self, text: str) -> Iterator[Token]:
        """The terms of ``text`` with their source spans and positions (same terms as
        :meth:`terms`, in the same order; ``text[t.start:t.end]`` is the source span)."""
        for position, (term, start, end) in enumerate(self._spans(_coerce(text))):
            yield Token(term, start, end, position)

    def whoosh_analyzer(self) -> WhooshTextAnalyzer:
        """A Whoosh analyzer giving exactly :meth:`terms`, for indexing and query parsing."""
        return WhooshTextAnalyzer(self.config, _analyzer=self)

    def spans(self, text: str) -> list[tuple[str, int, int]]:
        """(term, start, end) of every term of ``text`` in order: the terms of :meth:`terms`
        with their source spans, as one list (:meth:`tokens` without the positions)."""
        text = _coerce(text)
        get = self._spans_cache.get
        miss = self._token_spans
        out: list[_Span] = []
        add = out.append
        for match in _token_re(text).finditer(text):
            tok = match.group()
            found = get(tok)
            if found is None:
                found = miss(tok)
            base = match.start()
            for term, start, end in found:
                add((term, base + start, base + end))
        return out

    # -- plumbing ---------------------------------------------------------------------------

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(AnalyzerConfig.from_dict(state["config"]))  # type: ignore[misc]

    def _spans(self, text: str) -> Iterator[_Span]:
        """(term, start, end) for every term of ``text``, offsets absolute."""
        get = self._spans_cache.get
        for match in _token_re(text).finditer(text):
            tok = match.group()
            spans = get(tok)
            if spans is None:
                spans = self._token_spans(tok)
            base = match.start()
            for term, start, end in spans:
                yield term, base + start, base + end

    def _token_spans(self, tok: str) -> tuple[_Span, ...]:
        """One token's spans (relative to it), analysed and remembered."""
        cache = self._spans_cache
        spans = self._analyze(tok)
        if not self._is_cjk(tok) or len(tok) <= _CJK_CACHE_MAX_RUN:
            if len(cache) >= _CACHE_LIMIT:
                cache.clear()
            cache[tok] = spans
        return spans

    def _terms_miss(self, tok: str) -> tuple[str, ...] | list[str]:
        cache = self._terms_cache
        if _is_plain_word(tok):
            # The common case: _word_spans' first rule, without its other checks.
            word = tok.lower()
            if not self._min <= len(word) <= self._max or word in self._stops:
                found: tuple[str, ...] | list[str] = ()
            else:
                found = (self._stem_word(word),)
        elif self._is_cjk(tok):
            if self._jieba is None:
                found = _bigrams(tok)
            else:
                found = [term for term, _, _ in self._jieba_spans(tok)]
            if len(tok) > _CJK_CACHE_MAX_RUN:
                return found
            found = tuple(found)
        else:
            found = tuple(term for term, _, _ in self._word_spans(tok))
        if len(cache) >= _CACHE_LIMIT:
            cache.clear()
        cache[tok] = found
        return found

    @staticmethod
    def _is_cjk(tok: str) -> bool:
        # A token is either a pure CJK run or a word with no CJK character in it.
        return _CJK_CHAR_RE.match(tok) is not None

    def _analyze(self, tok: str) -> tuple[_Span, ...]:
        if self._is_cjk(tok):
            return _bigram_spans(tok) if self._jieba is None else self._jieba_spans(tok)
        return self._word_spans(tok)

    def _jieba_spans(self, run: str) -> tuple[_Span, ...]:
        assert self._jieba is not None
        try:
            spans = [(w, s, e) for w, s, e in self._jieba(run, mode="search") if w.strip()]
        except Exception:  # jieba is third-party: never let it break indexing
            return _bigram_spans(run)
        spans.sort(key=lambda span: (span[1], -span[2]))
        return tuple(spans)

    def _word_spans(self, tok: str) -> tuple[_Span, ...]:
        """Terms of one word token (possibly a dotted name), offsets relative to ``tok``."""
        if "[" in tok or "*" in tok:
            # The word the markup decorates; each of its terms spans the whole token.
            bare = _MARKUP_CHARS_RE.sub("", tok)
            return tuple((term, 0, len(tok)) for term, _, _ in self._word_spans(bare))
        if tok.isascii():
            if _is_plain_word(tok):
                return tuple(self._word(tok, 0, len(tok)))  # the common case
        else:
            tok = tok.translate(_FULLWIDTH)  # same length: offsets stay valid
        if "." not in tok:
            return tuple(self._segment_spans(tok, 0, len(tok)))
        segments = [(m.start(), m.end()) for m in _SEGMENT_RE.finditer(tok)]
        out: list[_Span] = []
        if self._split:
            real = [(s, e) for s, e in segments if tok[s:e].strip("_")]
            if len(real) > 1:
                start = (
                    real[0][0]
                    + len(tok[real[0][0] : real[0][1]])
                    - len(tok[real[0][0] : real[0][1]].lstrip("_"))
                )
                end = real[-1][1] - (
                    len(tok[real[-1][0] : real[-1][1]])
                    - len(tok[real[-1][0] : real[-1][1]].rstrip("_"))
                )
                whole = _fold(tok[start:end])
                if self._min <= len(whole) <= self._max:
                    out.append((whole, start, end))
        for s, e in segments:
            out.extend(self._segment_spans(tok, s, e))
        return tuple(out)

    def _segment_spans(self, tok: str, start: int, end: int) -> list[_Span]:
        """Terms of ``tok[start:end]``, a word with no dot."""
        seg = tok[start:end]
        # A pure function of the segment: the parts of dotted names (self, path, os) and of
        # identifiers repeat far more than the names themselves.
        found = self._segment_cache.get(seg)
        if found is None:
            found = self._segment_miss(seg)
            if len(self._segment_cache) >= _CACHE_LIMIT:
                self._segment_cache.clear()
            self._segment_cache[seg] = found
        if not start:
            return list(found)
        return [(term, start + s, start + e) for term, s, e in found]

    def _segment_miss(self, seg: str) -> tuple[_Span, ...]:
        """Terms of the segment ``seg``, offsets relative to it."""
        start, end = 0, len(seg)
        core = seg.strip("_")
        if not core:
            return ()
        start += len(seg) - len(seg.lstrip("_"))
        end = start + len(core)
        too_long = len(core) > self._max
        if not self._split or _is_plain_word(core):
            # A plain word is one part: the word rules alone (a long one is a blob).
            return () if too_long else tuple(self._word(core, start, end))
        if too_long and "_" not in core:
            return ()  # a blob, not a name
        parts = self._parts(core)
        if len(parts) == 1:
            return tuple(self._word(core, start, end))
        if _HEX_RE.fullmatch(core):
            return () if too_long else ((core.lower(), start, end),)
        out: list[_Span] = []
        if not too_long:
            whole = _fold(core)
            if len(whole) >= self._min:
                out.append((whole, start, end))
                # The lowercase spelling of a camelCase name is a plain word, and plain words
                # are stemmed: emit the stemmed whole too so "getusername" meets getUserName.
                if whole.isalpha():
                    stemmed = self._stem_word(whole)
                    if stemmed != whole:
                        out.append((stemmed, start, end))
        for ps, pe in parts:
            out.extend(self._word(core[ps:pe], start + ps, start + pe))
        return tuple(out)

    @staticmethod
    def _parts(core: str) -> list[tuple[int, int]]:
        """Split an identifier on underscores, camelCase and letter/digit boundaries."""
        parts: list[tuple[int, int]] = []
        for piece in _UNDERSCORE_SPLIT_RE.finditer(core):
            text, base = piece.group(), piece.start()
            mixed_case = not text.islower() and not text.isupper()
            splitter = _CASE_PART_RE if mixed_case else _DIGIT_PART_RE
            parts.extend((base + m.start(), base + m.end()) for m in splitter.finditer(text))
        return parts

    def _word(self, word: str, start: int, end: int) -> list[_Span]:
        """The word rules: fold, length limits, stopwords, stem (Latin script only)."""
        folded = _fold(word)
        if not self._min <= len(folded) <= self._max or folded in self._stops:
            return []
        return [(self._stem_word(folded), start, end)]

    def _stem_word(self, folded: str) -> str:
        """The stem of a folded word if stemming is on and the word is Latin letters only."""
        if self._stem and folded.isalpha() and (folded.isascii() or max(folded) < "\u0250"):
            try:
                stemmed = porter_stem(folded)
            except Exception:  # never let an odd word break indexing
                return folded
            if stemmed:
                return stemmed
        return folded


# --------------------------------------------------------------------------- Whoosh adapter


class WhooshTextAnalyzer(_ByConfig, _WhooshAnalyzerBase):
    """A :class:`TextAnalyzer` as a Whoosh analyzer, for ``TEXT(analyzer=...)``.

    Yields exactly ``TextAnalyzer.terms(value)`` with positions and character offsets. Whoosh
    pickles the schema into the index's TOC, so this class is pickled *by reference* (its
    module path is part of the on-disk format) and its state is only the configuration as a
    plain dict; it rebuilds its :class:`TextAnalyzer` when unpickled.

    ``removestops`` is accepted and ignored: stopwords are never terms, so there is nothing
    to mark as stopped. ``tokenize=False`` (used by Whoosh for prefix, wildcard and range
    query text) yields the case-folded value as a single unstemmed token.
    """

    def __init__(
        self, config: AnalyzerConfig | None = None, *, _analyzer: TextAnalyzer | None = None
    ):
        self._analyzer = _analyzer if _analyzer is not None else TextAnalyzer(config)
        self.config = self._analyzer.config

    def __call__(  # type: ignore[override]
        self,
        value: str,
        positions: bool = False,
        chars: bool = False,
        keeporiginal: bool = False,
        removestops: bool = True,
        start_pos: int = 0,
        start_char: int = 0,
        tokenize: bool = True,
        mode: str = "",
        **kwargs: Any,
    ) -> Iterator[_WhooshToken]:
        value = _coerce(value)
        # Whoosh convention: one Token object, mutated and yielded again and again.
        t = _WhooshToken(positions, chars, removestops=removestops, mode=mode, **kwargs)
        if not tokenize:
            t.text = _fold(value)
            t.original = value
            t.boost = 1.0
            t.stopped = False
            if positions:
                t.pos = start_pos
            if chars:
                t.startchar = start_char
                t.endchar = start_char + len(value)
            yield t
            return
        pos = start_pos
        if not chars and not keeporiginal:  # indexing: no offsets needed, take the fast path
            for term in self._analyzer.terms(value):
                t.text = term
                t.boost = 1.0
                t.stopped = False
                if positions:
                    t.pos = pos
                    pos += 1
                yield t
            return
        for term, start, end in self._analyzer._spans(value):
            t.text = term
            t.boost = 1.0
            t.stopped = False
            if keeporiginal:
                t.original = value[start:end]
            if positions:
                t.pos = pos
                pos += 1
            if chars:
                t.startchar = start_char + start
                t.endchar = start_char + end
            yield t

    def has_morph(self) -> bool:
        return self.config.stem

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._analyzer = TextAnalyzer(AnalyzerConfig.from_dict(state["config"]))
        self.config = self._analyzer.config


# --------------------------------------------------------------------------- language


_HAN_RE = re.compile(f"[{_HAN}]")
_KANA_RE = re.compile(f"[{_KANA}]")
_HANGUL_RE = re.compile(f"[{_HANGUL}]")
_LETTER_RE = re.compile(r"[^\W\d_]")
_LATIN_RE = re.compile(r"[A-Za-z\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u024f]")
_LANGUAGE_SAMPLE = 20_000
_NON_ASCII_RE = re.compile(r"[^\x00-\x7f]+")
_ASCII_LETTER_RE = re.compile(r"[A-Za-z]")
_NOT_ASCII_LETTERS = bytes(b for b in range(256) if not chr(b).isascii() or not chr(b).isalpha())


def _count(pattern: re.Pattern[str], text: str) -> int:
    return pattern.subn("", text)[1]


def detect_language(text: str) -> str:
    """A cheap script heuristic for an item's ``language`` field.

    ``"zh"`` when CJK characters dominate (one CJK character weighs as much as four letters
    of another script), ``"ja"`` if kana make up at least 5 % of them, ``"ko"`` if Hangul
    outnumbers Han and kana; ``"en"`` when Latin letters are the majority; ``""`` when there
    are no letters or another script dominates. Reads at most the first 20,000 characters.
    """
    sample = _coerce(text)[:_LANGUAGE_SAMPLE]
    if sample.isascii():
        # Every letter is Latin and none is CJK: the rules below give "en" for any letter.
        return "en" if _ASCII_LETTER_RE.search(sample) else ""
    # The regular expressions scan only the non-ASCII characters (usually a few); the ASCII
    # letters are counted by a byte translation, many times faster than a regex pass.
    ascii_letters = len(sample.encode("ascii", "ignore").translate(None, _NOT_ASCII_LETTERS))
    wide = "".join(_NON_ASCII_RE.findall(sample))
    letters = ascii_letters + _count(_LETTER_RE, wide)
    if not letters:
        return ""
    han = _count(_HAN_RE, wide)
    kana = _count(_KANA_RE, wide)
    hangul = _count(_HANGUL_RE, wide)
    cjk = han + kana + hangul
    other = letters - cjk
    if cjk and cjk * 4 >= other:
        if hangul > han + kana:
            return "ko"
        if kana * 20 >= cjk:
            return "ja"
        return "zh"
    if (ascii_letters + _count(_LATIN_RE, wide)) * 2 > other:
        return "en"
    return ""


# --------------------------------------------------------------------------- highlighting

_START_CUT_RE = re.compile(r"\s+|[。，、；：！？]")


def highlight_terms(query_terms: Iterable[str], analyzer: TextAnalyzer) -> frozenset[str]:
    """The terms :func:`highlight` marks for ``query_terms``: each as written (folded) and
    as analysed."""
    wanted: set[str] = set()
    for query_term in query_terms:
        wanted.add(_fold(query_term))
        wanted.update(analyzer.terms(query_term))
    return frozenset(wanted)


def highlight(
    text: str,
    query_terms: Iterable[str],
    analyzer: TextAnalyzer,
    *,
    marker: tuple[str, str] = ("**", "**"),
    max_chars: int = 300,
    spans: Iterable[tuple[str, int, int]] | None = None,
) -> str:
    """A snippet of ``text`` around the densest cluster of query-term matches.

    ``query_terms`` may be analysed terms (stems, bigrams) or raw query words: both are
    accepted (or the :func:`highlight_terms` of them, when many texts are highlighted for
    one query). Each matched source span is wrapped in ``marker`` (overlapping or touching
    spans, such as CJK bigrams, are merged). The snippet holds at most ``max_chars``
    characters of ``text`` (markers and ellipses not counted), is trimmed at whitespace or
    CJK punctuation where possible and has "…" where it was cut. Without a match it is the
    start of the text. ``spans`` is :meth:`TextAnalyzer.spans` of ``text`` when the caller
    has it already.
    """
    if max_chars < 1:
        raise ValueError(f"max_chars must be >= 1, got {max_chars!r}")
    text = _coerce(text)
    if not text:
        return ""
    regions = _regions(text, query_terms, analyzer, spans)
    n = len(text)
    if not regions:
        start, end = 0, min(n, max_chars)
        cluster_start = cluster_end = 0
    else:
        cluster_start, cluster_end = _densest(regions, max_chars)
        room = max_chars - (cluster_end - cluster_start)
        start = max(0, cluster_start - max(room, 0) // 2)
        end = min(n, max(cluster_end, start + max_chars))
        if end == n:
            start = max(0, min(start, n - max_chars, cluster_start))
    start, end = _trim(text, start, end, cluster_start, cluster_end)

    pieces = ["…"] if start > 0 else []
    cursor = start
    for region_start, region_end, _ in regions:
        if region_start < start or region_end > end:
            continue
        pieces += [text[cursor:region_start], marker[0], text[region_start:region_end], marker[1]]
        cursor = region_end
    pieces.append(text[cursor:end])
    if end < n:
        pieces.append("…")
    return "".join(pieces)


def matched_spans(
    text: str, query_terms: Iterable[str], analyzer: TextAnalyzer
) -> list[tuple[int, int]]:
    """The ``(start, end)`` offsets in ``text`` of what :func:`highlight` marks for
    ``query_terms`` (the same terms, the same merging), in order."""
    return [(start, end) for start, end, _ in _regions(_coerce(text), query_terms, analyzer)]


def _regions(
    text: str,
    query_terms: Iterable[str],
    analyzer: TextAnalyzer,
    spans: Iterable[tuple[str, int, int]] | None = None,
) -> list[tuple[int, int, set[str]]]:
    """The matched spans of ``text``, overlapping or touching ones merged, with their terms."""
    wanted = (
        query_terms
        if isinstance(query_terms, frozenset)
        else highlight_terms(query_terms, analyzer)
    )
    regions: list[tuple[int, int, set[str]]] = []
    for term, start, end in analyzer._spans(text) if spans is None else spans:
        if term not in wanted:
            continue
        if regions and start <= regions[-1][1]:
            last = regions[-1]
            last[2].add(term)
            regions[-1] = (last[0], max(last[1], end), last[2])
        else:
            regions.append((start, end, {term}))
    return regions


def _densest(regions: list[tuple[int, int, set[str]]], max_chars: int) -> tuple[int, int]:
    """The span of the window of regions fitting in ``max_chars`` with the most distinct
    terms, then the most regions; the earliest wins ties."""
    counts: dict[str, int] = {}
    best = (-1, -1)
    best_span = (regions[0][0], regions[0][1])
    left = 0
    for right, (_, right_end, right_terms) in enumerate(regions):
        for term in right_terms:
            counts[term] = counts.get(term, 0) + 1
        while left < right and right_end - regions[left][0] > max_chars:
            for term in regions[left][2]:
                counts[term] -= 1
                if not counts[term]:
                    del counts[term]
            left += 1
        score = (len(counts), right - left + 1)
        if score > best:
            best = score
            best_span = (regions[left][0], right_end)
    return best_span


def _trim(text: str, start: int, end: int, keep_start: int, keep_end: int) -> tuple[int, int]:
    """Move a cut inward to a whitespace / CJK punctuation boundary, never into the
    ``[keep_start, keep_end)`` cluster, and drop surrounding whitespace."""
    n = len(text)
    if 0 < start < n and not text[start - 1].isspace() and not text[start].isspace():
        limit = keep_start if keep_end > keep_start else end
        match = _START_CUT_RE.search(text, start, limit)
        if match:
            start = match.end()
    if 0 < end < n and not text[end].isspace() and not text[end - 1].isspace():
        floor = max(keep_end, start)
        cut = -1
        for i in range(end - 1, floor - 1, -1):
            ch = text[i]
            if ch.isspace():
                cut = i
                break
            if ch in "。，、；：！？":
                cut = i + 1
                break
        if cut > start:
            end = cut
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end
