"""The tokenizer of the reference systems, written here so the reference stays independent.

It follows the description of the published reference figures: Unicode words, lowercase,
English stopwords (the Lucene list bm25s ships), the Snowball English stemmer (PyStemmer) for
everything that is not CJK, and runs of Chinese / Japanese / Korean characters as overlapping
character bigrams (a lone character stays a unigram). It deliberately does not import
``knowledge_agent.analysis``: the package's analyzer is what is being measured.
"""

from __future__ import annotations

import re
from functools import lru_cache

import Stemmer
from bm25s.stopwords import STOPWORDS_EN

# Han (incl. extension A and compatibility ideographs), kana, Hangul syllables.
_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"
_TOKEN_RE = re.compile(rf"[{_CJK}]+|[^\W{_CJK}]+")
_CJK_RUN_RE = re.compile(rf"[{_CJK}]+")

STOPWORDS = frozenset(STOPWORDS_EN)


def cjk_bigrams(run: str) -> list[str]:
    """Overlapping character bigrams of a CJK run; a single character stays a unigram."""
    if len(run) < 2:
        return [run]
    return [run[i : i + 2] for i in range(len(run) - 1)]


def bigram_cjk_text(text: str) -> str:
    """Replace each CJK run of ``text`` by its space-separated bigrams (for tokenizers that
    cannot segment Chinese, such as SQLite FTS5's unicode61)."""
    return _CJK_RUN_RE.sub(lambda m: " " + " ".join(cjk_bigrams(m.group())) + " ", text)


class ReferenceTokenizer:
    """Text → list of index terms. Query and document go through the same instance."""

    def __init__(self) -> None:
        self._stemmer = Stemmer.Stemmer("english")
        self._stem = lru_cache(maxsize=200_000)(self._stemmer.stemWord)

    def __call__(self, text: str) -> list[str]:
        terms: list[str] = []
        for match in _TOKEN_RE.finditer(text.lower()):
            token = match.group()
            if _CJK_RUN_RE.match(token):
                terms.extend(cjk_bigrams(token))
            elif token not in STOPWORDS:
                terms.append(self._stem(token))
        return terms
