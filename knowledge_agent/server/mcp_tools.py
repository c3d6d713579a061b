"""The MCP tools, as plain functions over a :class:`KnowledgeAgentCore`.

Each tool is ``tool(core, …arguments) -> dict``: JSON-ready answers, ``KnowledgeAgentError``
for bad arguments. They know nothing of MCP, so they are tested by calling them; the server
(:mod:`knowledge_agent.server.app`) turns each one into an MCP tool whose input schema is the
signature below, minus ``core`` (and ``roots``), which the server fills in.

The docstrings and the ``Field`` descriptions are what an agent reads before calling a tool:
they say what it does, when to use it and what comes back. The three tools of seed 002
(``knowledge_list``, ``knowledge_text_search``, ``knowledge_semantic_search``) live in
:mod:`.knowledge_tools` and are listed here with the rest.

Every argument comes from an agent and is checked by the tool itself (:mod:`.arguments`):
a bad one is a ``KnowledgeAgentError`` naming it, whoever called. Two policies live in the
server rather than in the core, because only an agent-facing surface needs them: search
answers stay under a token budget (:mod:`.budget`), and nothing an agent names is read
unless the server was started to allow it: files only inside its folders
(:func:`resolve_roots`, :func:`path_within_roots`: real paths, symlinks resolved), web pages
only under its URL prefixes (checked by its ``UrlPolicy`` before anything is fetched).
"""

from __future__ import annotations

import heapq
import itertools
import os
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field

from knowledge_agent.core import KnowledgeAgentCore
from knowledge_agent.crawl import CrawlOptions, UrlPolicy
from knowledge_agent.errors import ConfigError, IngestError, NotFoundError, QueryError
from knowledge_agent.ingest.walker import WalkOptions
from knowledge_agent.models import KnowledgeChunk, MatchedChunk
from knowledge_agent.models.evidence import evidence_ref
from knowledge_agent.models.result_view import chunk_view, item_path, item_view, result_view
from knowledge_agent.patterns import MAX_GLOB_CHARS, glob_regex
from knowledge_agent.server import arguments as check
from knowledge_agent.server.budget import dumps, estimate_tokens, fit_to_budget
from knowledge_agent.server.knowledge_tools import (
    knowledge_list,
    knowledge_semantic_search,
    knowledge_text_search,
)
from knowledge_agent.storage.sqlite_storage import ItemFacts

__all__ = [
    "DOCUMENT_SOURCE_TYPES",
    "TOOLS",
    "add_knowledge",
    "delete_knowledge",
    "dumps",
    "estimate_tokens",
    "evidence_ref",
    "fit_to_budget",
    "get_knowledge_item",
    "index_status",
    "knowledge_list",
    "knowledge_semantic_search",
    "knowledge_text_search",
    "list_items",
    "path_within_roots",
    "read_chunk",
    "resolve_roots",
    "search_code",
    "search_docs",
    "search_knowledge",
]

MAX_LIMIT = 50
MAX_CONTEXT_WINDOW = 5
MIN_MAX_TOKENS = 500  # room for one result with part of its best chunk
MAX_MAX_TOKENS = 200_000
MAX_SCOPES = 20  # path prefixes, or file patterns, one search takes
MAX_LIST_LIMIT = 500
MAX_PATH_CHARS = 4096  # PATH_MAX on Linux
MAX_URL_CHARS = 4096
MAX_ID_CHARS = 200  # ids are 36 characters; an 8-character prefix names one too
MAX_REF_CHARS = MAX_PATH_CHARS + 200  # an evidence ref: an id, a path, lines and a hash
MAX_TITLE_CHARS = 1000
MAX_TEXT_CHARS = 20 * 1024 * 1024  # as much as the largest file a folder walk reads
# A relative file pattern gets "*/" in front (see _glob): it must still fit a glob's limit.
MAX_PATTERN_CHARS = MAX_GLOB_CHARS - 2
# A crawl an agent starts stops after this many seconds unless the call asks for more (up
# to the limit): an agent waits on its tool call, and MCP clients give up on a call after a
# minute or a few; two minutes fetch a hundred pages from most sites. A crawl longer than
# the limit is the user's to start (`knowledge-agent add URL`, ten minutes by default).
AGENT_CRAWL_SECONDS = 120.0
MAX_AGENT_CRAWL_SECONDS = 600.0
# Every source type the processors produce, except code (search_docs' scope). The core
# filters by inclusion only, so the complement is spelled out; "web" is for fetched pages.
DOCUMENT_SOURCE_TYPES = ("text", "markdown", "html", "pdf", "data", "log", "web")

# -- parameter types: their bounds and descriptions are the tools' input schema -------------

_NAMES = str | list[str] | None

Query = Annotated[
    str,
    Field(
        min_length=1,
        max_length=check.MAX_QUERY_CHARS,
        description="What to look for: a question or keywords, in any language "
        "(e.g. 'how do I roll back a deploy', '重置密码').",
    ),
]
KbNames = Annotated[
    _NAMES,
    Field(
        description="Knowledge base name, or a list of names; all of them when omitted "
        "(knowledge_list shows the names)."
    ),
]
Limit = Annotated[
    int, Field(ge=1, le=MAX_LIMIT, description="How many documents to return, best first.")
]
ContextWindow = Annotated[
    int,
    Field(
        ge=0,
        le=MAX_CONTEXT_WINDOW,
        description="Neighbouring chunks to add on each side of a matched chunk (0: none).",
    ),
]
MinScore = Annotated[
    float | None,
    Field(
        ge=0,
        le=1,
        description="Leave out documents whose confidence is below this (0-1, the same scale "
        "for any query): 0.2 drops most of what does not match, 0.3 keeps clear matches only.",
    ),
]
MaxTokens = Annotated[
    int,
    Field(
        ge=MIN_MAX_TOKENS,
        le=MAX_MAX_TOKENS,
        description="Budget for the whole answer (about 4 characters, or 1 CJK character, per "
        "token). Over it, context chunks go first, then extra matched chunks, then the lowest "
        "results, then long chunks are shortened; the answer then says truncated.",
    ),
]
Explain = Annotated[
    bool, Field(description="Add each result's score breakdown (matched terms, engine ranks).")
]
Facets = Annotated[
    bool,
    Field(
        description="Also count every matching document (not only those returned) per "
        "knowledge base, doc type and source type: where else to look, and how much is there."
    ),
]
PathPrefix = Annotated[
    _NAMES,
    Field(
        description="Only files or pages whose path or URL starts with this prefix, or with "
        "any of a list (e.g. '/home/me/notes/' or 'https://docs.python.org/3/')."
    ),
]
SourceTypes = Annotated[
    _NAMES,
    Field(description="Only these kinds of source: code, markdown, text, html, pdf, data, log."),
]
DocTypes = Annotated[
    _NAMES, Field(description="Only these document types (e.g. adr, runbook, guide).")
]
Languages = Annotated[
    _NAMES,
    Field(
        description="Only these languages: a natural language code for documents (en, zh) "
        "or a programming language for code (python, go)."
    ),
]
CodeLanguages = Annotated[
    _NAMES, Field(description="Only these programming languages, e.g. ['python', 'go'].")
]
FilePatterns = Annotated[
    _NAMES,
    Field(
        description="Only files matching one of these globs, e.g. ['*.py', 'src/*', "
        "'*/tests/*']; '*' also crosses '/', and a relative pattern matches at any depth."
    ),
]
CodeSymbol = Annotated[
    _NAMES,
    Field(
        description="Only code chunks defining this function or class, e.g. "
        "'Parser.parse_args' or 'parse_args' (a name matches whole or by its last part)."
    ),
]
CodeReferences = Annotated[
    _NAMES,
    Field(
        description="Only code chunks using or importing this name: who uses it, e.g. "
        "'retry_with_backoff'."
    ),
]
ChunkId = Annotated[
    str | None,
    Field(
        max_length=MAX_REF_CHARS,
        description="A chunk_id from a search result (a whole evidence ref is taken too).",
    ),
]
EvidenceRef = Annotated[
    str | None,
    Field(
        max_length=MAX_REF_CHARS,
        description="Instead of chunk_id: an evidence_ref from a search result "
        "(kb:<chunk_id>:<path>#L<start>-L<end>@<hash>), to read the text cited and check "
        "whether it is unchanged.",
    ),
]
Neighbors = Annotated[int, Field(ge=0, le=20, description="Chunks to include on each side.")]
ItemId = Annotated[
    str,
    Field(min_length=1, max_length=MAX_ID_CHARS, description="An item_id from a search result."),
]
MaxChars = Annotated[
    int, Field(ge=1, le=200_000, description="Return at most this many characters.")
]
Offset = Annotated[
    int, Field(ge=0, description="Start at this character (to page through a long text).")
]
KbName = Annotated[
    str,
    Field(
        description="The knowledge base to add to (created if new): letters, digits, '_', '.', "
        "'-'; 'default' when omitted."
    ),
]
SourcePath = Annotated[
    str | None,
    Field(
        max_length=MAX_PATH_CHARS,
        description="A file or folder to index (folders recursively, honouring .gitignore); "
        "it must lie inside a folder the server was started with (--root).",
    ),
]
Url = Annotated[
    str | None,
    Field(
        max_length=MAX_URL_CHARS,
        description="An http(s) URL of a web page, sitemap.xml or documentation site to crawl "
        "and index, instead of a path; only under a URL prefix the server was started with "
        "(--allow-url).",
    ),
]
Depth = Annotated[
    int,
    Field(ge=0, le=10, description="For a url: follow links this deep (0: that page only)."),
]
MaxPages = Annotated[
    int, Field(ge=1, le=10_000, description="For a url: fetch at most this many pages.")
]
MaxTime = Annotated[
    float,
    Field(
        ge=1,
        le=MAX_AGENT_CRAWL_SECONDS,
        description="For a url: the most seconds the whole crawl may take.",
    ),
]
Text = Annotated[str | None, Field(description="Text to store, instead of a path.")]
PathGlob = Annotated[
    _NAMES,
    Field(
        description="Only documents whose file path or URL matches this glob, or any of a "
        "list (e.g. '*.md', 'docs/*', 'https://docs.python.org/3/library/*'); '*' also "
        "crosses '/', and a relative pattern matches at any depth."
    ),
]
ListLimit = Annotated[
    int, Field(ge=1, le=MAX_LIST_LIMIT, description="How many documents to return (a page).")
]
ListOffset = Annotated[
    int,
    Field(ge=0, description="Skip this many documents (next_offset of the previous page)."),
]
Title = Annotated[
    str, Field(max_length=MAX_TITLE_CHARS, description="Title of the text (ignored for a path).")
]


# -- arguments shared by several tools ----------------------------------------------------------


def _glob(pattern: str) -> str:
    """A file pattern as a glob over absolute paths: a relative one matches at any depth."""
    if pattern.startswith(("*", "?", "[", "/", "\\")) or "://" in pattern or ":" in pattern[:3]:
        return pattern
    return "*/" + pattern


def _globs(value: object, name: str) -> list[str] | None:
    """The globs a path_glob or file_patterns argument gives (relative ones at any depth)."""
    patterns = check.names(name, value, max_count=MAX_SCOPES, max_chars=MAX_PATTERN_CHARS)
    return [_glob(pattern) for pattern in patterns] if patterns else None


def _prefixes(value: object) -> list[str] | None:
    return check.names("path_prefix", value, max_count=MAX_SCOPES, max_chars=MAX_PATH_CHARS)


# -- search -----------------------------------------------------------------------------------


def _search(
    core: KnowledgeAgentCore,
    query: object,
    filters: dict[str, Any],
    *,
    limit: object,
    context_window: object,
    min_score: object,
    max_tokens: object,
    include_explanation: object,
    facets: object = False,
) -> dict[str, Any]:
    """One filtered core search: every filter, the path prefixes and globs (each list OR-ed)
    included, narrows the candidates *before* ranking. With ``facets``, the answer's
    ``facets`` count the matching documents per scope (within ``max_tokens`` too)."""
    query = check.text("query", query, max_chars=check.MAX_QUERY_CHARS)
    limit = check.integer("limit", limit, 1, MAX_LIMIT)
    context_window = check.integer("context_window", context_window, 0, MAX_CONTEXT_WINDOW)
    max_tokens = check.integer("max_tokens", max_tokens, MIN_MAX_TOKENS, MAX_MAX_TOKENS)
    confidence = None if min_score is None else check.number("min_score", min_score, 0, 1)
    explain = check.flag("include_explanation", include_explanation)
    counted = (
        {"facets": core.facets(query, **filters).to_dict()} if check.flag("facets", facets) else {}
    )
    ranked = core.search(
        query,
        limit=limit,
        context_window=context_window,
        min_confidence=confidence,
        **filters,
    )
    views = [result_view(result, explain=explain) for result in ranked]
    answer = fit_to_budget(views, max_tokens, extra=counted)
    if not ranked:
        answer["hint"] = (
            "No match. Try other words or a wider scope; knowledge_text_search finds exact "
            "strings, knowledge_list shows the knowledge bases."
        )
    return answer


def search_knowledge(
    core: KnowledgeAgentCore,
    query: Query,
    *,
    kb: KbNames = None,
    limit: Limit = 5,
    context_window: ContextWindow = 1,
    source_type: SourceTypes = None,
    doc_type: DocTypes = None,
    path_prefix: PathPrefix = None,
    path_glob: PathGlob = None,
    language: Languages = None,
    min_score: MinScore = None,
    max_tokens: MaxTokens = 4000,
    include_explanation: Explain = False,
    facets: Facets = False,
) -> dict[str, Any]:
    """Search the knowledge bases: the best passages for a question, grouped per document.

    Hybrid keyword (BM25) + TF-IDF search over chunks. Each result is a document (item_id,
    title, path, kb, source_type, doc_type, content_chars, score, confidence) with
    matched_chunks, best first — content, location (path:12-30, path p.3 or url#section),
    heading, start/end line, page for PDFs, and an `evidence_ref`
    `kb:<chunk_id>:<path>#L<start>-L<end>@<hash>` to cite — and context_chunks, the
    neighbouring passages. Filters narrow the search before ranking. Use search_code or
    search_docs to search only code or only documents; read_chunk(chunk_id) to read around a
    passage. A reply over max_tokens is trimmed and says so (`truncated`, `note`). With
    facets, `facets` counts every matching document per kb, doc_type and source_type
    (`total` too): where else to look before narrowing with those filters.
    """
    filters = {
        "kb": check.knowledge_bases(core, "kb", kb),
        "source_type": check.names("source_type", source_type),
        "doc_type": check.names("doc_type", doc_type),
        "language": check.names("language", language),
        "path_prefix": _prefixes(path_prefix),
        "path_glob": _globs(path_glob, "path_glob"),
    }
    return _search(
        core,
        query,
        filters,
        limit=limit,
        context_window=context_window,
        min_score=min_score,
        max_tokens=max_tokens,
        include_explanation=include_explanation,
        facets=facets,
    )


def search_code(
    core: KnowledgeAgentCore,
    query: Query,
    *,
    kb: KbNames = None,
    languages: CodeLanguages = None,
    file_patterns: FilePatterns = None,
    path_prefix: PathPrefix = None,
    symbol: CodeSymbol = None,
    references: CodeReferences = None,
    limit: Limit = 5,
    context_window: ContextWindow = 1,
    min_score: MinScore = None,
    max_tokens: MaxTokens = 4000,
    include_explanation: Explain = False,
    facets: Facets = False,
) -> dict[str, Any]:
    """Search source code only: functions, classes and modules that match a question.

    Same answer as search_knowledge, restricted to code before ranking, so code is found
    even when documents would outrank it. Matched chunks of code also name their symbol
    (e.g. `Billing.total`), its type and signature, with start/end lines. `symbol` keeps
    the code defining a name, `references` the code using it ("who calls X").
    """
    filters = {
        "kb": check.knowledge_bases(core, "kb", kb),
        "source_type": "code",
        "language": [name.lower() for name in check.names("languages", languages) or ()] or None,
        "path_prefix": _prefixes(path_prefix),
        "path_glob": _globs(file_patterns, "file_patterns"),
        "symbol": check.names("symbol", symbol),
        "references": check.names("references", references),
    }
    return _search(
        core,
        query,
        filters,
        limit=limit,
        context_window=context_window,
        min_score=min_score,
        max_tokens=max_tokens,
        include_explanation=include_explanation,
        facets=facets,
    )


def search_docs(
    core: KnowledgeAgentCore,
    query: Query,
    *,
    kb: KbNames = None,
    doc_type: DocTypes = None,
    path_prefix: PathPrefix = None,
    path_glob: PathGlob = None,
    limit: Limit = 5,
    context_window: ContextWindow = 1,
    min_score: MinScore = None,
    max_tokens: MaxTokens = 4000,
    include_explanation: Explain = False,
    facets: Facets = False,
) -> dict[str, Any]:
    """Search documents only (Markdown, text, HTML, PDF, data, logs — everything but code).

    Same answer as search_knowledge, restricted to documents before ranking. path_prefix
    takes folder paths or URL prefixes (one or a list) to stay within one manual or site.
    """
    filters = {
        "kb": check.knowledge_bases(core, "kb", kb),
        "source_type": list(DOCUMENT_SOURCE_TYPES),
        "doc_type": check.names("doc_type", doc_type),
        "path_prefix": _prefixes(path_prefix),
        "path_glob": _globs(path_glob, "path_glob"),
    }
    return _search(
        core,
        query,
        filters,
        limit=limit,
        context_window=context_window,
        min_score=min_score,
        max_tokens=max_tokens,
        include_explanation=include_explanation,
        facets=facets,
    )


# -- browsing ---------------------------------------------------------------------------------


def read_chunk(
    core: KnowledgeAgentCore,
    chunk_id: ChunkId = None,
    *,
    evidence_ref: EvidenceRef = None,
    neighbors: Neighbors = 1,
) -> dict[str, Any]:
    """Read one chunk in full, with its document and the chunks around it: give the
    `chunk_id` or the `evidence_ref` a search result has.

    Returns `chunk` (content, heading, lines, evidence ref), `item` (its document), and
    `before` / `after`: up to `neighbors` chunks on each side, in document order. Given an
    evidence ref, also `citation`: whether the cited text is unchanged, moved, changed or
    gone since it was cited (the chunk shown is the text there now).
    """
    pairs = (("chunk_id", chunk_id), ("evidence_ref", evidence_ref))
    given = [(name, value) for name, value in pairs if value is not None]
    if len(given) != 1:
        raise QueryError("give chunk_id or evidence_ref (one of them), as a search result has")
    name, target = given[0]
    target = check.text(name, target, max_chars=MAX_REF_CHARS)
    neighbors = check.integer("neighbors", neighbors, 0, 20)
    citation = None
    if target.startswith("kb:"):
        try:
            citation = core.check_citation(target)
        except QueryError as exc:
            raise QueryError(f"{name}: {exc}") from None
        if citation.chunk is None:
            return {"citation": {"ref": target, "status": citation.status}}
        target = citation.chunk.id
    elif len(target) > MAX_ID_CHARS:
        raise QueryError(f"{name} is {len(target):,} characters long: it is no chunk id")
    try:
        found = core.read_chunk(target, neighbors=neighbors)
    except NotFoundError as exc:
        raise NotFoundError(f"{name}: {exc}") from None
    path = item_path(found.item)

    def view(chunk: KnowledgeChunk, *, matched: bool = False) -> dict[str, Any]:
        shown = chunk_view(MatchedChunk.from_chunk(chunk), path, matched=matched)
        shown.pop("score", None)
        shown.pop("passage", None)  # a chunk read, not a match: no passage was chosen
        return shown

    answer: dict[str, Any] = {
        "chunk": view(found.chunk, matched=True),
        "item": item_view(found.item),
        "before": [view(chunk) for chunk in found.before],
        "after": [view(chunk) for chunk in found.after],
    }
    if citation is not None:
        answer["citation"] = {
            "ref": citation.ref,
            "status": citation.status,
            "current_ref": citation.current_ref,
        }
    return answer


def get_knowledge_item(
    core: KnowledgeAgentCore,
    item_id: ItemId,
    *,
    max_chars: MaxChars = 8000,
    offset: Offset = 0,
) -> dict[str, Any]:
    """Read a whole document: its metadata and its text (up to max_chars from offset).

    `truncated: true` means the text goes on; call again with offset=`next_offset`.
    """
    item_id = check.text("item_id", item_id, max_chars=MAX_ID_CHARS)
    max_chars = check.integer("max_chars", max_chars, 1, 200_000)
    offset = check.integer("offset", offset, 0, 2**62)
    item = core.get_item(item_id)
    if item is None:
        raise NotFoundError(f"item_id: no item with id {item_id!r}")
    data = item.to_dict()
    content = item.content[offset : offset + max_chars]
    end = offset + len(content)
    answer = {
        **item_view(item),
        "tags": data["tags"],
        "metadata": data["metadata"],
        "created_at": data["created_at"],
        "updated_at": data["updated_at"],
        "offset": offset,
        "content": content,
        "truncated": end < len(item.content),
    }
    if answer["truncated"]:
        answer["next_offset"] = end
    return answer


def _listed(
    core: KnowledgeAgentCore,
    kbs: list[str] | None,
    source_types: list[str] | None,
    globs: list[str] | None,
) -> Iterator[ItemFacts]:
    """The facts (no text) of every item that passes the filters, in the storage's
    (created_at, id) order.

    The storage filters by one kb at a time and not by path or several source types, so
    the rest is filtered here while paging through ``iter_item_facts`` (keyset pages, no
    lock held between them): one stream per kb, merged in the same order the SQL uses.
    """
    streams = [core.storage.iter_item_facts(kb=name) for name in kbs or [None]]
    items: Iterable[ItemFacts] = (
        streams[0]
        if len(streams) == 1
        else heapq.merge(*streams, key=lambda item: (item.created_at, item.id))
    )
    # The same case-sensitive match as the search filters' path_glob; an item without a
    # path or URL (added text) matches no glob, not even "*".
    matcher = glob_regex(globs, "path_glob") if globs else None
    for item in items:
        if source_types and item.source_type not in source_types:
            continue
        uri = item.source_uri
        if matcher is not None and not (uri and matcher.match(uri)):
            continue
        yield item


def list_items(
    core: KnowledgeAgentCore,
    *,
    kb: KbNames = None,
    path_glob: PathGlob = None,
    source_type: SourceTypes = None,
    limit: ListLimit = 50,
    offset: ListOffset = 0,
) -> dict[str, Any]:
    """List the stored documents (items), oldest first, a page at a time — to see what a
    knowledge base holds or find an item_id without searching. Never returns their text.

    Each item: item_id, title, path (file path or URL), kb, source_type, doc_type, language,
    content_chars, updated_at and chunks. The answer says count, more (whether another page
    follows), next_offset when it does, and total when it is cheap to know (no path_glob
    and at most one kb and source_type). get_knowledge_item(item_id) reads a document.
    """
    limit = check.integer("limit", limit, 1, MAX_LIST_LIMIT)
    offset = check.integer("offset", offset, 0, 2**62)
    kbs = check.knowledge_bases(core, "kb", kb)
    source_types = check.names("source_type", source_type)
    globs = _globs(path_glob, "path_glob")
    total: int | None = None
    if globs is None and len(kbs or ()) <= 1 and len(source_types or ()) <= 1:
        # What the storage filters itself: one SQL page (one row more, to know if more follow).
        one_kb = kbs[0] if kbs else None
        page = core.list_items(
            kb=one_kb,
            source_type=source_types[0] if source_types else None,
            limit=limit + 1,
            offset=offset,
        )
        if source_types is None:
            total = core.storage.count_items(kb=one_kb)
    else:
        found = [
            facts.id
            for facts in itertools.islice(
                _listed(core, kbs, source_types, globs), offset, offset + limit + 1
            )
        ]
        read = core.storage.get_item_summaries(found)
        page = [read[item_id] for item_id in found if item_id in read]
    more = len(page) > limit
    items = [
        {
            **item_view(item),
            "updated_at": item.updated_at.isoformat(),
            "chunks": core.storage.count_chunks(item_id=item.id),  # an indexed COUNT
        }
        for item in page[:limit]
    ]
    answer: dict[str, Any] = {"count": len(items), "offset": offset}
    if total is not None:
        answer["total"] = total
    answer["more"] = more
    if more:
        answer["next_offset"] = offset + limit
    answer["items"] = items
    if not items and offset == 0:
        answer["hint"] = "No documents match; knowledge_list shows the knowledge bases."
    return answer


# -- writing ----------------------------------------------------------------------------------


def resolve_roots(roots: Iterable[str | os.PathLike[str]]) -> tuple[str, ...]:
    """The folders files may be added from, as real paths; ``ConfigError`` for a non-folder."""
    resolved = []
    for root in roots:
        real = os.path.realpath(os.path.expanduser(os.fspath(root)))
        if not os.path.isdir(real):
            raise ConfigError(f"root {os.fspath(root)!r} is not a folder")
        resolved.append(real)
    return tuple(dict.fromkeys(resolved))


def path_within_roots(path: str, roots: Sequence[str]) -> str:
    """The real path of ``path`` if it lies inside one of ``roots`` (real paths).

    The one check every path an agent names passes before anything is read: symlinks and
    ``..`` are resolved first, so neither can lead outside. A relative path is taken
    relative to the first root that has it. ``ConfigError`` naming ``path`` when it leads
    outside (whether or not it exists there), ``IngestError`` when nothing is there.
    """
    path = check.text("path", path, max_chars=MAX_PATH_CHARS)
    if "\x00" in path:
        raise ConfigError(f"path {path!r:.80} holds a NUL character: no file is named so")
    if not roots:
        raise ConfigError(
            "path: adding files is disabled: this server was started without --root folders "
            "(pass text instead, or restart it with `knowledge-agent serve --root DIR`)"
        )
    expanded = os.path.expanduser(path)
    candidates = (
        [expanded] if os.path.isabs(expanded) else [os.path.join(root, expanded) for root in roots]
    )
    real = next(
        (os.path.realpath(c) for c in candidates if os.path.exists(c)),
        os.path.realpath(candidates[0]),
    )
    if not any(os.path.commonpath([root, real]) == root for root in roots):
        raise ConfigError(
            f"path {path!r:.200} is outside the folders this server may read: {', '.join(roots)}"
        )
    if not os.path.exists(real):
        raise IngestError(real, f"no such file or directory (path {path!r:.200})")
    return real


def _web_url(url: object, policy: UrlPolicy | None) -> str:
    """``url`` if it is an http(s) URL the server's policy allows; checked before anything
    is fetched, and before the core could take a string that is no URL for a path."""
    url = check.text("url", url, max_chars=MAX_URL_CHARS)
    if policy is None or not policy.allowed_prefixes:
        raise ConfigError(
            "url: adding web pages is disabled: this server was started without --allow-url "
            "(restart it with `knowledge-agent serve --allow-url https://docs.example.com/`)"
        )
    # The core's own test for a web address: what passes here is never read as a path.
    if not url[:8].lower().startswith(("http://", "https://")):
        raise ConfigError(
            f"url must be an http:// or https:// address, got {url!r:.200}; "
            "files are added with path, from the server's --root folders"
        )
    refusal = policy.refusal(url)
    if refusal is not None:
        raise ConfigError(f"url {url!r:.200} is not allowed: {refusal}")
    return url


def add_knowledge(
    core: KnowledgeAgentCore,
    *,
    kb: KbName = "default",
    path: SourcePath = None,
    url: Url = None,
    text: Text = None,
    title: Title = "",
    depth: Depth = 1,
    max_pages: MaxPages = 100,
    max_time: MaxTime = AGENT_CRAWL_SECONDS,
    roots: Sequence[str] = (),
    url_policy: UrlPolicy | None = None,
) -> dict[str, Any]:
    """Add a file, a folder, a web page or doc site, or a piece of text to a knowledge base
    and index it.

    Give one of path, url or text. Re-adding a folder only re-reads files that changed and
    drops files that are gone; re-adding a url re-crawls it, fetching only changed pages.
    Returns the collect report: processed, unchanged, skipped and failed files or pages
    (with reasons), removed, chunks_added, item_ids.
    """
    given = [n for n, v in (("path", path), ("url", url), ("text", text)) if v is not None]
    if len(given) != 1:
        raise ConfigError(
            "give one of path, url or text (exactly one of them)"
            + (f"; got {' and '.join(given)}" if given else "")
        )
    title = check.text("title", title, max_chars=MAX_TITLE_CHARS, blank=True)
    crawl = CrawlOptions(
        max_depth=check.integer("depth", depth, 0, 10),
        max_pages=check.integer("max_pages", max_pages, 1, 10_000),
        max_time=check.number("max_time", max_time, 1, MAX_AGENT_CRAWL_SECONDS),
    )
    if url is not None:
        url = _web_url(url, url_policy)
        return core.collect_knowledge(url, kb=kb, crawl=crawl, url_policy=url_policy).to_dict()
    if text is not None:
        text = check.text("text", text, max_chars=MAX_TEXT_CHARS)
        # Not collect_knowledge(text): it would read a text that looks like a path as a file,
        # bypassing the roots check below.
        return core.collect_text(text, title=title, kb=kb).to_dict()
    if isinstance(path, str) and path[:8].lower().startswith(("http://", "https://")):
        raise ConfigError(f"path {path!r:.200} is a web address: pass it as url, not path")
    real = path_within_roots(path, roots)  # type: ignore[arg-type]
    # A Path, which the core never takes for text. Symlinks are not followed: one inside a
    # root could otherwise lead outside it.
    options = WalkOptions(follow_symlinks=False)
    return core.collect_knowledge(Path(real), kb=kb, walk_options=options).to_dict()


def delete_knowledge(
    core: KnowledgeAgentCore,
    item_id: ItemId,
) -> dict[str, Any]:
    """Delete one document (an item) and its chunks from its knowledge base and the indexes."""
    item_id = check.text("item_id", item_id, max_chars=MAX_ID_CHARS)
    item = core.get_item(item_id)
    if item is None or not core.delete_knowledge_item(item_id):
        raise NotFoundError(f"item_id: no item with id {item_id!r}")
    answer: dict[str, Any] = {"deleted": True, **item_view(item)}
    if item.metadata.get("root"):
        answer["note"] = "its file is still tracked: the next sync of its folder brings it back"
    return answer


def index_status(core: KnowledgeAgentCore) -> dict[str, Any]:
    """Health of the index: counts of knowledge bases, items, chunks and sources, both search
    indexes' counts, pending changes, sizes on disk, and any inconsistency found; `usage`:
    the embedding and rerank services' requests, texts and tokens since the server started."""
    answer = core.status().to_dict()
    answer["usage"] = {kind: used.to_dict() for kind, used in core.usage().items()}
    return answer


TOOLS = (
    search_knowledge,
    search_code,
    search_docs,
    knowledge_list,
    knowledge_text_search,
    knowledge_semantic_search,
    list_items,
    read_chunk,
    get_knowledge_item,
    add_knowledge,
    delete_knowledge,
    index_status,
)
"""Every tool, in the order the server lists them."""
