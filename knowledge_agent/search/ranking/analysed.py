"""A chunk's text analysed once per query, for every use the ranking and the results make of it.

A shown chunk's text was analysed three times a query: line by line for its passage evidence,
whole for the matched-term counts of its explanation, and span by span for its highlight.
Each pass walks every token in Python, which on the long chunks that answer long queries of
common words was most of a query's time after the keyword engines. :class:`AnalysedText`
holds one pass (terms with their source spans, :meth:`TextAnalyzer.tokens` order) and gives
each use its slice; :class:`TextAnalyses` keeps them for one query.

Units (the lines and sentences of :func:`~.passages.units`) are read off the whole text's
terms: no token crosses a unit's end (a line break, or a sentence end before a space, which
no word or CJK run holds), so a unit's terms are the terms that start inside it. That fails
only where the word pattern itself depends on the text: a text with markup inside words
(``E[x]tract``, ``**E**xtract``) is tokenized with the marked-word pattern as a whole but a
line of it without such markup is not, so a marked text's units are analysed alone, as
before.
"""

from __future__ import annotations

from bisect import bisect_left

from knowledge_agent.analysis import TextAnalyzer, has_inner_markup

__all__ = ["AnalysedText", "TextAnalyses"]

Span = tuple[str, int, int]


class AnalysedText:
    """One text's terms with their spans, from a single pass of the analyzer."""

    __slots__ = ("_analyzer", "_starts", "marked", "spans", "terms", "text")

    def __init__(self, text: str, analyzer: TextAnalyzer) -> None:
        self.text = text
        self._analyzer = analyzer
        self.spans: list[Span] = analyzer.spans(text)
        self.terms: list[str] = [span[0] for span in self.spans]
        self._starts = [span[1] for span in self.spans]
        self.marked = has_inner_markup(text)

    def unit_terms(self, start: int, end: int) -> list[str]:
        """The terms of ``text[start:end]`` when that unit is analysed alone."""
        if self.marked:
            return self._analyzer.terms(self.text[start:end])
        starts = self._starts
        return self.terms[bisect_left(starts, start) : bisect_left(starts, end)]


class TextAnalyses:
    """The :class:`AnalysedText` of each text one query looks at, each analysed once."""

    __slots__ = ("_found", "analyzer")

    def __init__(self, analyzer: TextAnalyzer) -> None:
        self.analyzer = analyzer
        self._found: dict[str, AnalysedText] = {}

    def __call__(self, text: str) -> AnalysedText:
        found = self._found.get(text)
        if found is None:
            found = self._found[text] = AnalysedText(text, self.analyzer)
        return found
