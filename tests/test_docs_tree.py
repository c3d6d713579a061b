"""A documentation project collected as a folder: its pages, not its templates, host
settings or built site; pages without a top heading titled by their front matter or first
line."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
from click.testing import CliRunner
from files import write

from knowledge_agent import KnowledgeAgentCore
from knowledge_agent.cli import cli
from knowledge_agent.ingest.report import NOT_DOCUMENT
from knowledge_agent.ingest.walker import WalkOptions, is_included
from knowledge_agent.processors.text import first_line


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A MkDocs project: pages, a theme's overrides, a CNAME, and a site built from it."""
    root = tmp_path / "project"
    write(root / "mkdocs.yml", "site_name: Pumps\nsite_url: https://pumps.example.com/\n")
    write(root / "docs/index.md", "# Pumps\n\nThe handbook of the pump station.\n")
    write(
        root / "docs/guide.md", "The priming guide: fill the casing first.\n\n## Steps\n\nOpen.\n"
    )
    write(root / "docs/howto.md", "---\ntitle: How to bleed a pump\n---\n\nOpen the bleed screw.\n")
    write(root / "docs/about.md", "<!-- draft -->\n\n## About the **station**\n\nSince 1962.\n")
    write(root / "docs/CNAME", "pumps.example.com\n")
    write(
        root / "overrides/main.html", '{% extends "base.html" %}\n{% block content %}{% endblock %}'
    )
    write(root / "overrides/partials/footer.html", "<footer>{{ config.copyright }}</footer>")
    write(root / "docs/_templates/layout.html", "{% block body %}{% endblock %}")
    write(root / "templates/mail.j2", "Dear {{ name }},")
    write(root / "site/index.html", "<title>Pumps</title><p>The handbook of the pump station.</p>")
    (root / "site/sitemap.xml.gz").write_bytes(gzip.compress(b"<urlset/>"))
    write(root / "docs/_build/html/index.html", "<p>Sphinx output.</p>")
    return root


def relative_sources(core: KnowledgeAgentCore, root: Path) -> set[str]:
    return {
        Path(item.source_uri or "").relative_to(root).as_posix()
        for item in core.list_items(limit=100)
    }


def test_a_docs_project_collects_its_pages_and_leaves_out_what_is_no_document(
    project: Path, core: KnowledgeAgentCore
) -> None:
    report = core.collect_knowledge(project)

    assert relative_sources(core, project) == {
        "mkdocs.yml",
        "docs/index.md",
        "docs/guide.md",
        "docs/howto.md",
        "docs/about.md",
    }
    groups = {group.kind: group for group in report.skip_summary()}
    assert groups["template"].count == 4 and groups["template"].reason == NOT_DOCUMENT
    assert dict(groups["template"].extensions) == {"html": 3, "j2": 1}
    assert groups["site setting"].paths == (str(project / "docs/CNAME"),)
    titles = {Path(item.source_uri or "").name: item.title for item in core.list_items()}
    assert titles["index.md"] == "Pumps"  # its top heading
    assert titles["guide.md"] == "The priming guide: fill the casing first."
    assert titles["howto.md"] == "How to bleed a pump"  # front matter
    assert titles["about.md"] == "About the station"


def test_what_is_left_out_by_default_comes_back_when_asked_for(
    project: Path, core: KnowledgeAgentCore
) -> None:
    core.collect_knowledge(project, include=["*.j2", "CNAME"], exclude=["!_build/"])
    assert relative_sources(core, project) == {"templates/mail.j2", "docs/CNAME"}
    core.collect_knowledge(project, kb="sphinx", exclude=["!_build/"])
    assert "docs/_build/html/index.html" in {
        Path(item.source_uri or "").relative_to(project).as_posix()
        for item in core.list_items(kb="sphinx")
    }
    core.collect_knowledge(project / "site", kb="built")  # a built site named as the root
    assert [item.title for item in core.list_items(kb="built")] == ["Pumps"]


def test_is_included_agrees_with_the_walk_on_the_new_defaults(project: Path) -> None:
    options = WalkOptions()
    for relative in ("docs/CNAME", "overrides/main.html", "site/index.html", "docs/_build/x"):
        assert not is_included(project, project / relative, options)
    assert is_included(project, project / "docs/guide.md", options)


def test_the_command_line_counts_templates_and_site_settings_as_not_documents(
    project: Path, tmp_path: Path
) -> None:
    runner = CliRunner()
    base = ["--data-dir", str(tmp_path / "data")]
    added = runner.invoke(cli, [*base, "add", str(project)])
    verbose = runner.invoke(cli, [*base, "add", str(project), "--full", "-v"])

    assert added.exit_code == 0
    assert "4 templates (html, j2)" in added.output
    assert "1 site setting file: " in added.output
    assert "overrides/main.html: not a document (template)" in verbose.output


@pytest.mark.parametrize(
    ("text", "title"),
    [
        ("## Install\n\ntext", "Install"),
        (
            "<!-- c -->\n\n![logo](x.png)\n\nThe **quick** [guide](a.md) to `deploy`.",
            "The quick guide to deploy.",
        ),
        ("```\ncode\n```\n- item one", "item one"),
        ('{% include "x" %}\n> quoted line', "quoted line"),
        ('!!! note "Heads up"\n    body', "Heads up"),
        ("1. first step", "first step"),
        ("   \n\n---\n", ""),
        ("word " * 30, ("word " * 15).strip() + "…"),
    ],
)
def test_the_first_line_as_a_title(text: str, title: str) -> None:
    assert first_line(text) == title
