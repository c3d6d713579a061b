"""The one JSON view of a search result: where a matched passage is, for files, PDFs and
crawled pages, with and without a passage; its shape as the MCP tools publish it."""

from __future__ import annotations

import json

from made_results import chunk, passage, result
from pydantic import TypeAdapter

from knowledge_agent.models.result_view import chunk_view, location, result_view
from knowledge_agent.server.budget import dumps, estimate_tokens, fit_to_budget
from knowledge_agent.server.schemas import SearchAnswer

GUIDE = """# Guide

Read this first.

## Installing

Run the installer.
Then restart the service:

```bash
systemctl restart app
```

## Usage

Call the tool with --help.
"""

PAGE_URL = "https://docs.example.org/guide"


def test_a_passage_is_located_by_its_own_lines_heading_and_ref() -> None:
    found = passage(GUIDE, 7, 12, heading_path=("Guide", "Installing"))
    best = chunk(GUIDE, 5, 17, heading="Guide > Installing, Usage", found=found)

    view = result_view(result("docs/guide.md", [best]))["matched_chunks"][0]

    assert view["location"] == "docs/guide.md:7-12"
    assert (view["start_line"], view["end_line"]) == (7, 12)
    assert view["heading"] == "Guide > Installing"
    assert view["heading_path"] == ["Guide", "Installing"]
    assert view["link"] == ""
    assert view["evidence_ref"] == found.evidence_ref and "#L7-L12@" in view["evidence_ref"]
    assert view["passage"] == found.to_dict()
    assert view["passage"]["text"] == "\n".join(GUIDE.split("\n")[6:12])
    # The chunk is still the whole chunk: its positions and text.
    assert (view["start_position"], view["end_position"]) == (
        best.start_position,
        best.end_position,
    )
    assert view["content"] == best.content


def test_without_a_passage_the_chunk_is_located_as_before() -> None:
    best = chunk(GUIDE, 5, 12, heading="Guide > Installing")

    view = result_view(result("docs/guide.md", [best]))["matched_chunks"][0]

    assert view["location"] == "docs/guide.md:5-12"
    assert (view["start_line"], view["end_line"]) == (5, 12)
    assert view["heading"] == "Guide > Installing"
    assert view["heading_path"] == ["Guide > Installing"]  # the chunk's, not guessed apart
    assert view["passage"] is None
    assert "#L5-L12@" in view["evidence_ref"]


def test_a_crawled_page_is_located_by_its_link_never_by_lines() -> None:
    anchored = passage(GUIDE, 7, 8, heading_path=("Guide", "Installing"), link=PAGE_URL + "#inst")
    before_headings = passage(GUIDE, 3, 3, heading_path=("Guide",))
    chunks = [
        chunk(GUIDE, 5, 12, index=1, found=anchored, url=PAGE_URL + "#inst", anchor="inst"),
        chunk(GUIDE, 1, 3, index=0, found=before_headings, url=PAGE_URL, anchor=""),
        chunk(GUIDE, 1, 3, index=0, url=PAGE_URL, anchor=""),  # no passage
    ]

    views = result_view(result(PAGE_URL, chunks))["matched_chunks"]

    assert [v["location"] for v in views] == [PAGE_URL + "#inst", PAGE_URL, PAGE_URL]
    assert [v["link"] for v in views] == [PAGE_URL + "#inst", PAGE_URL, PAGE_URL]
    assert views[1]["heading_path"] == ["Guide"]  # before the first heading: the page title
    # The ref still cites lines of the stored text; the link is where a browser goes.
    assert "#L7-L8@" in views[0]["evidence_ref"] and "#L3-L3@" in views[1]["evidence_ref"]


def test_a_passage_link_moves_to_the_section_inside_the_chunk() -> None:
    # The chunk starts in one section; its passage sits under a later anchored heading.
    found = passage(GUIDE, 16, 16, heading_path=("Guide", "Usage"), link=PAGE_URL + "#usage")
    best = chunk(GUIDE, 5, 16, found=found, url=PAGE_URL + "#inst")

    view = result_view(result(PAGE_URL, [best]))["matched_chunks"][0]

    assert view["location"] == view["link"] == PAGE_URL + "#usage"
    assert view["url"] == PAGE_URL + "#inst"  # the chunk's own, as stored


def test_a_pdf_passage_is_located_by_its_page() -> None:
    found = passage(GUIDE, 7, 8, path="r.pdf", page=3)
    best = chunk(GUIDE, 5, 12, found=found, page=2, page_end=4)
    bare = chunk(GUIDE, 5, 12, page=2, page_end=4)

    views = result_view(result("r.pdf", [best, bare]))["matched_chunks"]

    assert views[0]["location"] == "r.pdf p.3"
    assert views[0]["page"] == 3 and "page_end" not in views[0]
    assert views[1]["location"] == "r.pdf p.2-4"
    assert (views[1]["page"], views[1]["page_end"]) == (2, 4)


def test_location_rules() -> None:
    assert location("a.md", {"start_line": 3, "end_line": 9}) == "a.md:3-9"
    assert location(PAGE_URL, {"url": PAGE_URL, "start_line": 1, "end_line": 3}) == PAGE_URL
    on_web = {"url": PAGE_URL, "page": 2, "page_end": 2}
    assert location(PAGE_URL, on_web) == f"{PAGE_URL} p.2"  # a PDF from the web
    lines_only = passage(GUIDE, 7, 8)
    assert location("a.md", {"start_line": 5, "end_line": 12}, lines_only) == "a.md:7-8"


def test_context_chunks_have_no_passage_ref_or_score() -> None:
    found = passage(GUIDE, 7, 8)
    neighbour = chunk(GUIDE, 14, 16, index=2, heading="Guide > Usage", found=found)

    view = chunk_view(neighbour, "docs/guide.md", matched=False)

    assert view["location"] == "docs/guide.md:14-16"  # where the neighbour is, whole
    assert not {"passage", "evidence_ref", "score"} & set(view)


def test_the_view_survives_a_json_round_trip_of_the_result() -> None:
    found = passage(GUIDE, 7, 12, heading_path=("Guide", "Installing"), link=PAGE_URL + "#i")
    original = result(PAGE_URL, [chunk(GUIDE, 5, 12, found=found, url=PAGE_URL + "#i")])
    again = type(original).from_dict(json.loads(json.dumps(original.to_dict())))

    assert result_view(again) == result_view(original)


def test_views_with_and_without_passages_have_the_published_shape() -> None:
    found = passage(GUIDE, 7, 12, heading_path=("Guide", "Installing"))
    views = [
        result_view(result("docs/guide.md", [chunk(GUIDE, 5, 12, found=found)])),
        result_view(result("docs/guide.md", [chunk(GUIDE, 5, 12)])),
        result_view(
            result(PAGE_URL, [chunk(GUIDE, 1, 3, found=passage(GUIDE, 3, 3), url=PAGE_URL)])
        ),
    ]

    TypeAdapter(SearchAnswer).validate_python(fit_to_budget(views, 4000))


def test_over_budget_the_chunk_text_goes_before_its_passage_text() -> None:
    long = "\n".join(f"line {n} of a long section about the installer" for n in range(400))
    found = passage(long, 200, 203)
    view = result_view(result("docs/long.md", [chunk(long, 1, 400, found=found)]))
    passage_tokens = estimate_tokens(found.text)

    answer = fit_to_budget([view], 400 + passage_tokens)

    kept = answer["results"][0]["matched_chunks"][0]
    assert answer["truncated"] and kept["content_truncated"]
    assert len(kept["content"]) < len(long) // 4
    assert kept["passage"]["text"] == found.text  # what answers is kept whole
    assert estimate_tokens(dumps(answer)) <= 400 + passage_tokens


def test_without_room_even_the_passage_text_is_cut() -> None:
    long = "\n".join(f"line {n} of a long section about the installer" for n in range(400))
    found = passage(long, 1, 300)
    view = result_view(result("docs/long.md", [chunk(long, 1, 400, found=found)]))

    answer = fit_to_budget([view], 600)

    kept: dict = answer["results"][0]["matched_chunks"][0]
    assert kept["content"] == ""
    assert kept["passage"]["text"].endswith("…") and len(kept["passage"]["text"]) < len(found.text)
    assert "shortened 1 chunk" in answer["note"]
