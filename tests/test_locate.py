"""Passages: the block of a matched chunk that answers, located by lines, section, page and
link."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from knowledge_agent import KnowledgeAgentCore
from knowledge_agent.models.evidence import EvidenceRef
from knowledge_agent.models.knowledge_chunk import KnowledgeChunk
from knowledge_agent.search.ranking.locate import blocks, link_at, locate, passage_span

GUIDE = """# Deploying

Intro text about the app.

## Threads

To change the maximum number of threads, set it like this:

```python
app = App(max_threads=16)

app.run()
```

## Secrets

Keep secrets in environment variables.
"""


def span_of(text: str, words: str) -> tuple[int, int]:
    start = text.index(words)
    return start, start + len(words)


def test_blocks_keep_a_fenced_block_whole_blank_lines_included() -> None:
    found = [(GUIDE[start:end], kind) for start, end, kind in blocks(GUIDE)]
    assert found[0] == ("# Deploying", "heading")
    assert ("Intro text about the app.", "text") in found
    code = [text for text, kind in found if kind == "code"]
    assert code == ["```python\napp = App(max_threads=16)\n\napp.run()\n```"]


def test_an_unclosed_fence_runs_to_the_end() -> None:
    text = "Intro.\n\n```\ncode line\n\nmore code\n"
    assert [kind for _, _, kind in blocks(text)] == ["text", "code"]
    assert text[blocks(text)[1][0] : blocks(text)[1][1]] == "```\ncode line\n\nmore code"


def test_a_paragraph_ending_with_a_colon_takes_the_code_it_introduces() -> None:
    start, end = passage_span(GUIDE, span_of(GUIDE, "maximum number of threads"))
    assert GUIDE[start:end].startswith("To change the maximum")
    assert GUIDE[start:end].endswith("app.run()\n```")


def test_a_line_inside_code_gives_the_whole_code_block() -> None:
    start, end = passage_span(GUIDE, span_of(GUIDE, "app.run()"))
    assert GUIDE[start:end] == "```python\napp = App(max_threads=16)\n\napp.run()\n```"


def test_a_heading_takes_the_block_under_it_and_a_plain_paragraph_stays_alone() -> None:
    start, end = passage_span(GUIDE, span_of(GUIDE, "## Secrets"))
    assert GUIDE[start:end] == "## Secrets\n\nKeep secrets in environment variables."
    start, end = passage_span(GUIDE, span_of(GUIDE, "Intro text"))
    assert GUIDE[start:end] == "Intro text about the app."


def test_no_unit_gives_the_whole_chunk() -> None:
    assert passage_span("\n\ntext\n\nmore\n\n", None) == (2, 12)


def test_a_paragraph_ending_with_a_colon_before_a_heading_stays_alone() -> None:
    # The colon introduces nothing here: the next block is a new section's heading.
    text = "Options:\n\n# Next\n\nBody text."
    start, end = passage_span(text, span_of(text, "Options"))
    assert text[start:end] == "Options:"


def chunk_of(content: str, start: int, end: int, **metadata: object) -> KnowledgeChunk:
    first_line = content.count("\n", 0, start) + 1
    return KnowledgeChunk(
        item_id="i",
        content=content[start:end],
        heading="Deploying",
        start_position=start,
        end_position=end,
        metadata={"start_line": first_line, **metadata},
    )


def test_a_passage_is_located_in_the_section_and_on_the_lines_it_is() -> None:
    start = GUIDE.index("Intro")
    sections = [[GUIDE.index("## Threads") - start, "Deploying > Threads"]]
    sections.append([GUIDE.index("## Secrets") - start, "Deploying > Secrets"])
    chunk = chunk_of(GUIDE, start, len(GUIDE), sections=sections)
    passage = locate(chunk, span_of(chunk.content, "environment"), "guide.md")
    assert passage.text == "Keep secrets in environment variables."
    assert passage.heading_path == ["Deploying", "Secrets"]
    line = GUIDE.splitlines().index(passage.text) + 1
    assert (passage.start_line, passage.end_line) == (line, line)
    assert GUIDE[passage.start_position : passage.end_position] == passage.text
    ref = EvidenceRef.parse(passage.evidence_ref)
    assert (ref.chunk_id, ref.path, ref.start_line, ref.end_line) == (
        chunk.id,
        "guide.md",
        line,
        line,
    )
    assert ref.matches(chunk.content)
    before = locate(chunk, span_of(chunk.content, "Intro text"), "guide.md")
    assert before.heading_path == ["Deploying"], "text before a later section: the chunk's own"


def test_a_crawled_pages_passage_links_to_the_nearest_anchored_heading_before_it() -> None:
    anchors = [[GUIDE.index("## Secrets"), "secrets"]]
    chunk = chunk_of(GUIDE, 0, len(GUIDE), url="https://docs.example/deploy/", anchors=anchors)
    secrets = locate(chunk, span_of(GUIDE, "environment"), "https://docs.example/deploy/")
    assert secrets.link == "https://docs.example/deploy/#secrets"
    assert "#L" in secrets.evidence_ref and "#secrets" not in secrets.evidence_ref
    intro = locate(chunk, span_of(GUIDE, "Intro text"), "https://docs.example/deploy/")
    assert intro.link == "https://docs.example/deploy/", "before the first anchor: the page"
    assert locate(chunk_of(GUIDE, 0, 20), None, "guide.md").link == "", "a file has no link"


def test_a_pdf_passage_is_on_the_page_it_starts_on() -> None:
    text = "Page one text.\n\nPage two text.\n\nPage three text."
    chunk = chunk_of(text, 0, len(text), page=4, page_end=6, page_starts=[16, 32])
    assert locate(chunk, span_of(text, "one"), "r.pdf").page == 4
    assert locate(chunk, span_of(text, "two"), "r.pdf").page == 5
    assert locate(chunk, span_of(text, "three"), "r.pdf").page == 6


markdownish = st.lists(
    st.sampled_from(
        ["# Title", "## Part", "text line", "more: ", "```", "code()", "", "  ", "~~~", "x"]
    ),
    max_size=30,
).map("\n".join)


@settings(max_examples=300, deadline=None)
@given(text=markdownish, data=st.data())
def test_a_passage_is_always_text_of_the_chunk_on_the_lines_it_says(text: str, data) -> None:
    prefix = "lead\n" * data.draw(st.integers(0, 3))
    content = prefix + text
    chunk = chunk_of(content, len(prefix), len(content))
    at = data.draw(st.integers(0, max(len(text) - 1, 0)))
    passage = locate(chunk, (at, at + 1) if text else None, "f.md")
    assert content[passage.start_position : passage.end_position] == passage.text
    assert len(prefix) <= passage.start_position <= passage.end_position <= len(content)
    if passage.text:
        first = content.count("\n", 0, passage.start_position) + 1
        last = content.count("\n", 0, passage.end_position - 1) + 1
        assert (passage.start_line, passage.end_line) == (first, last)
    if text.strip() and text[at : at + 1].strip():
        assert passage.start_position <= len(prefix) + at < passage.end_position


def test_a_short_page_stored_as_one_chunk_locates_its_third_section() -> None:
    doc = "# Guide\n\nShort intro.\n\n## Setup\n\nInstall it.\n\n## Secrets\n\n"
    doc += "Use env vars for tokens."
    with KnowledgeAgentCore(None) as core:
        item = core.add_text(doc, title="Guide", source_uri="g.md")
        assert len(core.storage.get_chunks_for_item(item.id)) == 1
        passage = core.search("tokens in env vars", limit=1)[0].matched_chunks[0].passage
        assert passage is not None
        assert passage.heading_path == ["Guide", "Secrets"]
        assert (passage.start_line, passage.end_line) == (11, 11)
        assert passage.text == "Use env vars for tokens."
        assert core.check_citation(passage.evidence_ref).status == "unchanged"


# One chunk holds the query's words often and under a heading of them all, in no order (a
# higher BM25); the other holds them together in one line, as asked: the latter answers.
SCATTERED = "## Threads, number, maximum, change\n\n" + "Threads number maximum change. " * 6
ANSWER = "To change the maximum number of threads, pass max_threads to the server."


def test_the_first_passage_is_the_one_with_the_strongest_evidence_in_the_document() -> None:
    filler = "\n\n".join(f"## Note {i}\n\n" + "unrelated words here " * 8 for i in range(4))
    doc = f"# Server\n\n{SCATTERED}\n\n{filler}\n\n## Answer\n\n{ANSWER}"
    query = "change the maximum number of threads"
    # passage_depth 1: only the best fused chunk of the whole query was weighed before.
    narrow = {"passage_depth": 1, "passage_candidates": 1, "max_chunks_per_item": 1}
    wide = {"passage_depth": 1}
    with KnowledgeAgentCore(None) as core:
        core.add_text(doc, title="Server", source_uri="server.md")
        before = core.search(query, limit=1, options=narrow)[0]
        after = core.search(query, limit=1, options=wide)[0]
    assert ANSWER not in before.matched_chunks[0].content
    assert after.matched_chunks[0].passage is not None
    assert after.matched_chunks[0].passage.text == ANSWER
    assert after.matched_chunks[0].passage.heading_path == ["Server", "Answer"]
    assert after.relevance_score == after.matched_chunks[0].score
    for chunk in after.matched_chunks:
        assert 0 <= chunk.explanation.details["confidence"] <= 1


def test_an_indented_literal_block_belongs_to_the_paragraph_before_it() -> None:
    text = "Intro.\n\nSet the cache like this::\n\n    CACHES = {}\n\n    more = 1\n\nAfter."
    start, end = passage_span(text, span_of(text, "Set the cache"))
    assert text[start:end] == "Set the cache like this::\n\n    CACHES = {}\n\n    more = 1"


def test_a_rest_title_or_label_takes_the_block_under_it() -> None:
    text = ".. _unique:\n\n``unique_together``\n-------------------\n\nSets of field names that"
    text += " must be unique together."
    start, end = passage_span(text, span_of(text, "unique_together"))
    assert text[start:end] == "``unique_together``\n-------------------\n\nSets of field names " + (
        "that must be unique together."
    )
    start, end = passage_span(text, span_of(text, ".. _unique:"))
    assert text[start:end].startswith(".. _unique:\n\n``unique")


def test_a_label_whose_section_went_to_the_next_chunk_shows_that_section(tmp_path) -> None:
    # reST chunks per section: the label of the next section ends the previous chunk.
    intro = "Text about templates and their layout in an application. " * 4
    body = "Call csrf_exempt on the view that receives the callbacks. " * 3
    doc = f"Layout\n======\n\n{intro}\n\n.. _webhook-exemption:\n\nTurning off\n"
    doc += f"===========\n\n{body}\n"
    (tmp_path / "guide.rst").write_text(doc)
    with KnowledgeAgentCore(None) as core:
        core.collect_knowledge(tmp_path / "guide.rst")
        item = core.list_items()[0]
        chunks = core.storage.get_chunks_for_item(item.id)
        label = next(c for c in chunks if c.content.endswith(".. _webhook-exemption:"))
        first = core.search("webhook exemption", limit=1)[0].matched_chunks[0]
    assert first.chunk_id == label.id, "only the label's chunk has the words"
    assert first.passage is not None
    assert first.passage.text.startswith("Turning off\n===")
    assert body.strip() in first.passage.text
    assert first.passage.evidence_ref.startswith(f"kb:{chunks[label.chunk_index + 1].id}:")


def test_text_before_any_heading_takes_the_document_title_as_its_heading_path() -> None:
    chunk = KnowledgeChunk(item_id="i", content="Plain text.", heading="", metadata={})
    passage = locate(chunk, (0, 5), "notes.txt", title="Release notes")
    assert passage.heading_path == ["Release notes"]
    assert locate(chunk, (0, 5), "notes.txt").heading_path == [], "no title: no path"


def test_no_url_gives_no_link_whatever_the_anchors() -> None:
    anchors = [[0, "top"]]
    assert link_at({"url": "", "anchors": anchors}, 5) == ""
    assert link_at({"url": 42, "anchors": anchors}, 5) == ""
    assert link_at({"anchors": anchors}, 5) == ""


def test_malformed_anchor_pairs_are_ignored() -> None:
    url = "https://docs.example/page"
    anchors = [[None, "none"], [2.5, "float"], ["1", "text"], [1], [3, ""], "ab", [0, "top"]]
    assert link_at({"url": url, "anchors": anchors}, 10) == f"{url}#top"


def test_chunks_stored_without_headings_take_the_document_title(tmp_path) -> None:
    # Chunks written through the lower layers (or by an older chunker) may have no heading.
    from knowledge_agent.models.knowledge_item import KnowledgeItem

    text = "# Ferry times\n\nThe boat leaves the harbour at seven and returns at noon."
    cut = text.index("The boat")
    item = KnowledgeItem(title="Harbour timetable", content=text, source_uri="harbour.md")
    chunks = [
        KnowledgeChunk(item_id=item.id, chunk_index=index, content=text[start:end],
                       start_position=start, end_position=end, metadata={"start_line": line})
        for index, (start, end, line) in enumerate([(0, cut - 2, 1), (cut, len(text), 3)])
    ]  # fmt: skip
    with KnowledgeAgentCore(tmp_path / "kb") as core:
        core.storage.save_item_with_chunks(item, chunks)
        core.engine.update_chunk_index(item.id, chunks)
        boat = core.search("boat returns noon")[0].matched_chunks[0]
        heading = core.search("ferry times")[0].matched_chunks[0]
    assert boat.chunk_id == chunks[1].id and heading.chunk_id == chunks[0].id
    assert boat.passage is not None and heading.passage is not None
    assert boat.passage.heading_path == ["Harbour timetable"]
    # A chunk that is only a heading shows the next chunk's text, titled the same way.
    assert heading.passage.text == text[cut:]
    assert heading.passage.heading_path == ["Harbour timetable"]
