"""A token count that needs no tokenizer and no download.

:func:`estimate_tokens` counts roughly as an LLM does: one token per CJK character, one per
four other characters. It is what every budget in the package measures with (a search
answer's ``max_tokens``, a packed context's ``budget``) and what usage statistics estimate
with when a service does not report its tokens.
"""

from __future__ import annotations

import math
import re

__all__ = ["estimate_tokens"]

# Ideographs, kana, hangul, CJK punctuation and full-width forms: about one token each.
_CJK = re.compile(
    "[\u2e80-\u9fff\uac00-\ud7af\uf900-\ufaff\ufe30-\ufe4f\uff00-\uffef\U00020000-\U0003134f]"
)


def estimate_tokens(text: str) -> int:
    """Roughly how many tokens an LLM spends on ``text``.

    One per CJK character, one per four other characters (rounded up): close enough to
    keep an answer under a budget without shipping a tokenizer. The count of a text is at
    most the sum of the counts of its parts.
    """
    cjk = len(_CJK.findall(text))
    return cjk + math.ceil((len(text) - cjk) / 4)
