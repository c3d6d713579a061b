"""The three agent tools of seed 002, parameter for parameter as the spec gives them.

``knowledge_list`` names the knowledge bases with their intros, ``knowledge_text_search``
finds lines of stored text like grep, ``knowledge_semantic_search`` finds the passages that
answer a question (with an optional rerank). Every answer is compact JSON,
``{"ok": true, "count", "truncated", "items": [...]}`` — the searches also echo the
knowledge base and the keyword or query — and a bad argument is a tool error.

Like the other tools, these are plain functions over a :class:`KnowledgeAgentCore`; the
server (:mod:`knowledge_agent.server.app`) turns each into an MCP tool whose input schema
is its signature and whose description is its docstring.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from typing import Annotated, Any

from pydantic import Field

from knowledge_agent.analysis import highlight
from knowledge_agent.core import KnowledgeAgentCore
from knowledge_agent.core.text_search import compile_pattern, linked, matching_lines
from knowledge_agent.models import SearchResult
from knowledge_agent.patterns import MAX_GLOB_CHARS, MAX_PATTERN_CHARS, REGEX_SECONDS
from knowledge_agent.server import arguments as check
from knowledge_agent.server.passages import (
    NEAR_IDENTICAL,
    FoundPassage,
    deduplicated,
    ranked_passages,
)
from knowledge_agent.server.rerank import plan_rerank, rerank_scores
from knowledge_agent.server.views import clip

__all__ = ["knowledge_list", "knowledge_semantic_search", "knowledge_text_search"]

MAX_TOP_K = 50
DEFAULT_TOP_K = 5
"""Passages knowledge_semantic_search recalls when neither the call nor the settings say."""
# A source keyword becomes a glob with a [xX] class per letter (see _contains_glob): four
# characters each, and "*" on both sides, must stay within a glob's length limit.
MAX_SOURCE_KEYWORD_CHARS = (MAX_GLOB_CHARS - 2) // 4
# The source_keyword pass over titles filters a search's results, so it looks this many
# times deeper than top_k (paths are filtered inside the engines and need no margin).
_TITLE_DEPTH = 5

# -- parameter types: their bounds and descriptions are the tools' input schema -------------

OnlyReady = Annotated[
    bool,
    Field(
        description="Only knowledge bases that have an intro (an intro.md at the root of a "
        "collected folder gives one); false lists every knowledge base."
    ),
]
IncludeIntro = Annotated[bool, Field(description="Give each knowledge base's intro.")]
IncludeHasIntro = Annotated[
    bool, Field(description="Give has_intro: whether the knowledge base has an intro.")
]
IntroMaxChars = Annotated[
    int, Field(ge=0, le=4000, description="Cut each intro to this many characters.")
]
MaxItems = Annotated[
    int,
    Field(
        ge=1,
        le=1000,
        description="Return at most this many knowledge bases (truncated: true if there are more).",
    ),
]
NameKeyword = Annotated[
    str | None,
    Field(
        max_length=check.MAX_NAME_CHARS,
        description="Only knowledge bases whose name contains this text (case-insensitive).",
    ),
]
KnowledgeBase = Annotated[
    str,
    Field(
        min_length=1,
        max_length=check.MAX_NAME_CHARS,
        description="The knowledge base to search: a name from knowledge_list.",
    ),
]
Keyword = Annotated[
    str,
    Field(
        min_length=1,
        max_length=MAX_PATTERN_CHARS,
        description="The text to find, literally (a regex with regex=true).",
    ),
]
MaxLines = Annotated[
    int, Field(ge=1, le=500, description="Return at most this many matching lines.")
]
MaxChars = Annotated[
    int,
    Field(
        ge=20,
        le=200_000,
        description="Budget for the whole answer: the texts of all lines together stay within "
        "this many characters; lines past it are left out (truncated: true).",
    ),
]
MaxCharsPerLine = Annotated[
    int,
    Field(ge=20, le=2000, description="Cut each line to this many characters around the match."),
]
CaseSensitive = Annotated[bool, Field(description="Match letter case exactly.")]
SourceKeyword = Annotated[
    str | None,
    Field(
        max_length=MAX_SOURCE_KEYWORD_CHARS,
        description="Only documents whose source — file path, URL or title — contains this "
        "text (case-insensitive).",
    ),
]
IncludeSource = Annotated[
    bool, Field(description="Give each line's source (its file path or URL).")
]
IncludeLine = Annotated[bool, Field(description="Give each line's 1-based line number.")]
Regex = Annotated[
    bool,
    Field(
        description="Treat keyword as a Python regular expression (one that takes over "
        f"{REGEX_SECONDS:g} s to match is refused)."
    ),
]
Query = Annotated[
    str,
    Field(
        min_length=1,
        max_length=check.MAX_QUERY_CHARS,
        description="The question or topic, in any language (e.g. 'how do I reset my "
        "password', '怎么重置密码').",
    ),
]
TopK = Annotated[
    int | None,
    Field(
        ge=1,
        le=MAX_TOP_K,
        description="How many passages to recall, best first; several may come from one "
        "document. Omitted: the server's default_top_k (5 unless configured).",
    ),
]
EnableRerank = Annotated[
    bool | None,
    Field(
        description="Rerank the recalled passages with the server's reranker and keep the "
        "best rerank_top_k; omitted: rerank whenever the server has a reranker."
    ),
]
RerankTopK = Annotated[
    int | None,
    Field(
        ge=1,
        le=MAX_TOP_K,
        description="Passages to keep after a rerank (default: the server's rerank_top_k, 3 "
        "unless configured). It must be below top_k: "
        "otherwise it is lowered to top_k - 1 (no rerank when top_k is 1) and a note says so.",
    ),
]
MinRelevance = Annotated[
    float,
    Field(
        ge=0,
        le=1,
        description="Leave out passages whose relevance is below this (0-1, the same scale for "
        "any query): 0.2 drops most of what does not match, 0.3 keeps clear matches only.",
    ),
]
MaxCharsPerItem = Annotated[
    int,
    Field(
        ge=20,
        le=4000,
        description="Cut each passage to this many characters around the query's words "
        "(read_chunk(chunk_id) gives it whole).",
    ),
]
IncludeRerankScore = Annotated[
    bool, Field(description="Give each passage its rerank_score when a rerank ran.")
]
Deduplicate = Annotated[
    bool,
    Field(
        description="Drop a passage whose source and text repeat a better one's, or whose "
        "text is near-identical to a better passage of the same source (at least "
        f"{NEAR_IDENTICAL:.0%} of their distinct words, after stemming, in common)."
    ),
]


# -- knowledge_list -----------------------------------------------------------------------------


def knowledge_list(
    core: KnowledgeAgentCore,
    *,
    only_ready: OnlyReady = True,
    include_intro: IncludeIntro = True,
    include_has_intro: IncludeHasIntro = False,
    intro_max_chars: IntroMaxChars = 120,
    max_items: MaxItems = 50,
    name_keyword: NameKeyword = None,
) -> dict[str, Any]:
    """List the knowledge bases and what each is about. Call it first, then pick the
    knowledge_base for knowledge_text_search / knowledge_semantic_search from the intros.

    Returns {ok, count, truncated, items}: per knowledge base its name, intro (cut to
    intro_max_chars; a knowledge base's intro is the intro.md at the root of its folder),
    has_intro on request, and how much it holds: items, chunks, sources (tracked files),
    roots (collected folders), last_indexed_at. By default only knowledge bases with an
    intro are listed (a note counts the others). truncated: more than max_items matched.
    """
    check.flag("only_ready", only_ready)
    check.flag("include_intro", include_intro)
    check.flag("include_has_intro", include_has_intro)
    check.integer("intro_max_chars", intro_max_chars, 0, 4000)
    check.integer("max_items", max_items, 1, 1000)
    name_keyword = check.optional_text("name_keyword", name_keyword, max_chars=check.MAX_NAME_CHARS)
    keyword = (name_keyword or "").strip().lower()
    matched: list[tuple[dict[str, Any], str]] = []
    without_intro = 0
    for info in core.list_kbs():
        if keyword and keyword not in info.name.lower():
            continue
        intro = " ".join(info.description.split())
        if only_ready and not intro:
            without_intro += 1
            continue
        matched.append((info.to_dict(), intro))
    items = []
    for data, intro in matched[:max_items]:
        entry: dict[str, Any] = {"name": data["name"]}
        if include_intro:
            entry["intro"], _ = clip(intro, intro_max_chars)
        if include_has_intro:
            entry["has_intro"] = bool(intro)
        for key in ("items", "chunks", "sources", "roots", "last_indexed_at"):
            entry[key] = data[key]
        items.append(entry)
    answer: dict[str, Any] = {
        "ok": True,
        "count": len(items),
        "truncated": len(matched) > max_items,
        "items": items,
    }
    if without_intro:
        answer["note"] = (
            f"{without_intro} knowledge base(s) without an intro not listed; only_ready=false "
            "lists them too."
        )
    return answer


# -- knowledge_text_search ----------------------------------------------------------------------


def knowledge_text_search(
    core: KnowledgeAgentCore,
    knowledge_base: KnowledgeBase,
    keyword: Keyword,
    *,
    max_lines: MaxLines = 20,
    max_chars: MaxChars = 2000,
    max_chars_per_item: MaxCharsPerLine = 180,
    case_sensitive: CaseSensitive = False,
    source_keyword: SourceKeyword = None,
    include_source: IncludeSource = True,
    include_line: IncludeLine = True,
    regex: Regex = False,
) -> dict[str, Any]:
    """Find exact text in a knowledge base's stored documents, line by line, like grep.

    Unlike knowledge_semantic_search this is literal: every line containing keyword, in
    document order. Use it for names, identifiers, error messages, numbers. Returns {ok,
    knowledge_base, keyword, count, truncated, items}: per line its source (file path or
    URL), for a web page its link (the URL with the anchor of the line's section), line
    (1-based, of the stored text) and text, cut to max_chars_per_item around the match.
    truncated: more lines match than max_lines or the max_chars budget let through.
    """
    check.integer("max_lines", max_lines, 1, 500)
    check.integer("max_chars", max_chars, 20, 200_000)
    check.integer("max_chars_per_item", max_chars_per_item, 20, 2000)
    for name, value in (
        ("case_sensitive", case_sensitive),
        ("include_source", include_source),
        ("include_line", include_line),
        ("regex", regex),
    ):
        check.flag(name, value)
    source_keyword = check.optional_text(
        "source_keyword", source_keyword, max_chars=MAX_SOURCE_KEYWORD_CHARS
    )
    # Compiled here, not by core.text_search, so that its errors name this argument.
    expression = compile_pattern(
        keyword, regex=regex, case_sensitive=case_sensitive, name="keyword"
    )
    knowledge_base = check.knowledge_base(core, "knowledge_base", knowledge_base)
    # The cut adds up to two "…" around its width; a line may not outgrow the budget.
    width = min(max_chars_per_item, max_chars) - 2
    lines = matching_lines(
        core.storage.iter_items(kb=knowledge_base),
        expression,
        source_keyword=source_keyword or None,
        max_chars_per_line=width,
    )
    matches = list(itertools.islice(lines, max_lines + 1))  # one extra tells if more follow
    items: list[dict[str, Any]] = []
    used = 0
    for match in linked(matches[:max_lines], core.storage.get_chunks_for_item):
        if used + len(match.line) > max_chars:
            break
        used += len(match.line)
        item: dict[str, Any] = {}
        if include_source:
            item["source"] = match.source_uri or match.title or match.item_id
            if match.link:
                item["link"] = match.link
        if include_line:
            item["line"] = match.line_number
        item["text"] = match.line
        items.append(item)
    return {
        "ok": True,
        "knowledge_base": knowledge_base,
        "keyword": keyword,
        "count": len(items),
        "truncated": len(items) < len(matches),
        "items": items,
    }


# -- knowledge_semantic_search ------------------------------------------------------------------


def _contains_glob(keyword: str) -> str:
    """A glob matching any path that contains ``keyword``, whatever its letter case."""
    parts = []
    for char in keyword:
        if char in "*?[":
            parts.append(f"[{char}]")
        elif char.lower() != char.upper() and len(char.lower()) == len(char.upper()) == 1:
            parts.append(f"[{char.lower()}{char.upper()}]")
        else:
            parts.append(char)
    return "*" + "".join(parts) + "*"


def _recall(
    core: KnowledgeAgentCore,
    query: str,
    knowledge_base: str,
    top_k: int,
    min_relevance: float,
    source_keyword: str | None,
) -> list[SearchResult]:
    """The best ``top_k`` documents for ``query``, each with up to ``top_k`` matched chunks:
    the best ``top_k`` passages all come from these, as a passage's document scores at least
    as high as the passage.

    ``min_relevance`` leaves out the documents whose first passage falls below it.
    ``source_keyword`` on the path or URL is a filter inside both engines (before ranking,
    so a narrow scope still fills its top_k); the engines cannot filter titles, so titles
    are matched over a deeper search of the whole knowledge base, filtered here.
    """
    common: dict[str, Any] = {
        "kb": knowledge_base,
        "context_window": 0,
        "min_confidence": min_relevance or None,
        # For this call only: one document may give every passage.
        "options": {"max_chunks_per_item": top_k},
    }
    keyword = (source_keyword or "").strip().lower()
    if not keyword:
        return core.search(query, limit=top_k, **common)
    found = core.search(query, limit=top_k, path_glob=_contains_glob(keyword), **common)
    by_title = core.search(query, limit=top_k * _TITLE_DEPTH, **common)
    found += [result for result in by_title if keyword in result.item.title.lower()]
    best: dict[str, SearchResult] = {}
    for result in found:
        kept = best.get(result.item.id)
        if kept is None or result.relevance_score > kept.relevance_score:
            best[result.item.id] = result
    return sorted(best.values(), key=lambda result: -result.relevance_score)[:top_k]


def _passages(
    core: KnowledgeAgentCore,
    query: str,
    knowledge_base: str,
    *,
    top_k: int,
    min_relevance: float,
    source_keyword: str | None,
    deduplicate: bool,
) -> list[FoundPassage]:
    """The best ``top_k`` passages for ``query``, best first, at least ``min_relevance``
    each, without repeats when ``deduplicate``."""
    results = _recall(core, query, knowledge_base, top_k, min_relevance, source_keyword)

    def whole_text(item_id: str) -> str:
        item = core.get_item(item_id)
        return item.content if item is not None else ""

    passages: Iterable[FoundPassage] = (
        passage
        for passage in ranked_passages(results, whole_text)
        if passage.relevance >= min_relevance
    )
    if deduplicate:
        passages = deduplicated(passages, core.analyzer.terms)
    return list(itertools.islice(passages, top_k))


def _excerpt(core: KnowledgeAgentCore, text: str, query: str, max_chars: int) -> tuple[str, bool]:
    """``text`` cut to ``max_chars`` around the query's words, and whether it was cut."""
    if len(text) <= max_chars:
        return text, False
    # highlight adds up to two "…" around the characters it keeps.
    return highlight(text, [query], core.analyzer, marker=("", ""), max_chars=max_chars - 2), True


def knowledge_semantic_search(
    core: KnowledgeAgentCore,
    knowledge_base: KnowledgeBase,
    query: Query,
    *,
    top_k: TopK = None,
    enable_rerank: EnableRerank = None,
    rerank_top_k: RerankTopK = None,
    min_relevance: MinRelevance = 0.0,
    source_keyword: SourceKeyword = None,
    max_chars_per_item: MaxCharsPerItem = 220,
    include_rerank_score: IncludeRerankScore = True,
    deduplicate: Deduplicate = True,
) -> dict[str, Any]:
    """Find the passages of a knowledge base that answer a question, best first.

    Recalls the top_k best passages (hybrid BM25 + TF-IDF over chunks, so the passage that
    answers comes back even from a long document); a long document with several passages
    about the question gives several. Passages below min_relevance and repeats
    (deduplicate) are left out, the next best recalled in their place. With a reranker on
    the server, reranks the passages and keeps the best rerank_top_k. Returns {ok,
    knowledge_base, query, count, truncated, reranked, items}: per passage its source
    (file path or URL), text (cut to max_chars_per_item around the query's words),
    relevance (0-1, comparable across queries), rerank_score after a rerank, and chunk_id
    for read_chunk. truncated: a text was cut. A note explains a rerank that was adjusted
    or not done.
    """
    check.text("query", query, max_chars=check.MAX_QUERY_CHARS)
    defaults = core.engine.config
    if top_k is None:
        top_k = min(defaults.default_top_k or DEFAULT_TOP_K, MAX_TOP_K)
    check.integer("top_k", top_k, 1, MAX_TOP_K)
    if enable_rerank is not None:
        check.flag("enable_rerank", enable_rerank)
    elif defaults.enable_rerank is False:  # true asks no more than the default: when configured
        enable_rerank = False
    if rerank_top_k is not None:
        check.integer("rerank_top_k", rerank_top_k, 1, MAX_TOP_K)
    check.integer("max_chars_per_item", max_chars_per_item, 20, 4000)
    min_relevance = check.number("min_relevance", min_relevance, 0, 1)
    source_keyword = check.optional_text(
        "source_keyword", source_keyword, max_chars=MAX_SOURCE_KEYWORD_CHARS
    )
    check.flag("include_rerank_score", include_rerank_score)
    check.flag("deduplicate", deduplicate)
    knowledge_base = check.knowledge_base(core, "knowledge_base", knowledge_base)
    plan = plan_rerank(
        top_k=top_k,
        enable_rerank=enable_rerank,
        rerank_top_k=rerank_top_k,
        available=core.reranker is not None,
        default_keep=defaults.rerank_top_k,
    )
    notes = list(plan.notes)
    passages = _passages(
        core,
        query,
        knowledge_base,
        top_k=top_k,
        min_relevance=min_relevance,
        source_keyword=source_keyword,
        deduplicate=deduplicate,
    )
    reranked = False
    if plan.enabled and passages and core.reranker is not None:
        scores = rerank_scores(core.reranker, query, [passage.text for passage in passages])
        if scores is None:
            notes.append("the reranker failed: passages are in recall order")
        else:
            for passage, score in zip(passages, scores, strict=True):
                passage.rerank_score = score
            # A stable sort: equal scores keep the recall order.
            passages = sorted(passages, key=lambda p: -(p.rerank_score or 0.0))[: plan.keep]
            reranked = True
    items = []
    truncated = False
    for passage in passages:
        text, cut = _excerpt(core, passage.text, query, max_chars_per_item)
        truncated = truncated or cut
        item: dict[str, Any] = {
            "source": passage.source,
            "text": text,
            "relevance": round(passage.relevance, 4),
        }
        if reranked and include_rerank_score and passage.rerank_score is not None:
            item["rerank_score"] = round(passage.rerank_score, 6)
        if passage.chunk_id is not None:
            item["chunk_id"] = passage.chunk_id
        items.append(item)
    answer: dict[str, Any] = {
        "ok": True,
        "knowledge_base": knowledge_base,
        "query": query,
        "count": len(items),
        "truncated": truncated,
        "reranked": reranked,
        "items": items,
    }
    if notes:
        answer["note"] = "; ".join(notes)
    return answer
