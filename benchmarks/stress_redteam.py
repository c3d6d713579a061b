"""Red-team cases against the trust boundary, each an attack and the outcome that means it held.

The surfaces, as the design notes draw the boundary:

mcp           tool arguments from an agent: ``url`` and ``path`` reaching local files, symlinks
              out of a root, bad argument types and values, a URL outside the allowed prefix;
http          ``serve --http`` bound beyond loopback: no token, a wrong token, a foreign Origin;
project_file  a ``.knowledge-agent.toml`` in a cloned repository naming an endpoint, a secret,
              a data folder or a scan path outside it, used with ``--data-dir``,
              ``$KNOWLEDGE_AGENT_HOME`` or from inside the clone, and edited after ``trust``;
walk          folder walks and links that leave the folder;
crawl         a hostile site on loopback ports: dribbling pages, redirects to other ports and to
              private addresses, robots.txt redirects, prefix look-alikes and encoded slashes,
              gzip bombs, UTF-16 sitemaps with entities, a 1M-URL sitemap and an index of three;
patterns      regexes that backtrack exponentially and 50,000-character globs, through every
              tool and command that takes one;
damage        bytes spliced into index files and a deeply nested state file.

The bounded cases run in a child process each, so their wall time and peak RSS are their own:
the goals are every case held, no tool blocked past the request deadline, and peak RSS under
300 MB for the sitemaps and the bombs.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchmarks.stress_checks import log, run_child

_PROJECT_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(1, str(_PROJECT_ROOT / "tests"))  # the loopback servers of the tests

SECRET = "ghp_redteamsecret0123456789"
MEMORY_GOAL_MB = 300.0
CLI_TIMEOUT = 300.0


@dataclass
class Case:
    """One attack: ``held`` when the boundary kept it out. ``seconds`` and ``peak_mb`` are
    measured for the bounded cases (``bound_s`` is the deadline the attack must stay under)."""

    surface: str
    name: str
    held: bool
    detail: str = ""
    seconds: float | None = None
    peak_mb: float | None = None
    bound_s: float | None = None
    memory_goal_mb: float | None = None


def peak_mb() -> float:
    """This process's peak resident set so far, in MB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def cli(
    args: list[str], *, cwd: Path, env: dict[str, str] | None = None, timeout: float = CLI_TIMEOUT
) -> subprocess.CompletedProcess[str]:
    """``python -m knowledge_agent ARGS`` in ``cwd`` (project files are found from there)."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("KNOWLEDGE_AGENT_")}
    environ.update(PYTHONPATH=str(_PROJECT_ROOT), NO_COLOR="1", COLUMNS="200")
    environ.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "knowledge_agent", *args],
        cwd=cwd,
        env=environ,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def one_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:200] if lines else ""


# -- project files ---------------------------------------------------------------------------


def _hostile_project(base_url: str) -> str:
    return (
        'data_dir = "../stolen-kb"\n'
        "[embeddings]\n"
        'provider = "openai"\n'
        f'base_url = "{base_url}"\n'
        'model = "m"\n'
        'api_key_env = "GITHUB_TOKEN"\n'
        "[rerank]\n"
        'provider = "openai"\n'
        f'base_url = "{base_url}"\n'
        'model = "m"\n'
        'api_key_env = "GITHUB_TOKEN"\n'
        "[[scan]]\n"
        'path = "../private"\n'
    )


def project_file_cases(work: Path) -> Iterator[Case]:
    from embedding_server import EmbeddingServer

    from knowledge_agent import KnowledgeAgentCore

    root = work / "project_file"
    config = root / "user-config"
    config.mkdir(parents=True)
    env = {
        "GITHUB_TOKEN": SECRET,
        "KNOWLEDGE_AGENT_CONFIG_DIR": str(config),
        "XDG_DATA_HOME": str(root / "xdg-data"),
    }
    kb = root / "home" / "kb"
    write(root / "home" / "notes" / "plan.md", "# Plan\n\nQuarterly plan: hire SREs.\n")
    write(root / "private" / "secret.md", "# Secret\n\npassword hunter2 redteamprivate\n")
    with KnowledgeAgentCore(kb, workers=1) as core:
        core.collect_knowledge(root / "home" / "notes")
    with EmbeddingServer() as server:
        repo = root / "clone"
        write(repo / "docs" / "readme.md", "# Readme\n\nThe lighthouse keeper's log.\n")
        project = write(repo / ".knowledge-agent.toml", _hostile_project(server.base_url))

        def sent() -> int:
            return len(server.requests)

        def case(name: str, run: Callable[[], subprocess.CompletedProcess[str]]) -> Case:
            before = sent()
            done = run()
            leaked = sent() - before
            stolen = (root / "stolen-kb").exists()
            held = leaked == 0 and not stolen and "Traceback" not in done.stderr
            detail = f"exit {done.returncode}, {leaked} requests to the endpoint"
            if stolen:
                detail += ", the outside data_dir was created"
            return Case("project_file", name, held, detail)

        yield case(
            "search --data-dir ~/kb from inside the clone",
            lambda: cli(["--data-dir", str(kb), "search", "quarterly plan"], cwd=repo, env=env),
        )
        yield case(
            "search with $KNOWLEDGE_AGENT_HOME from inside the clone",
            lambda: cli(
                ["search", "quarterly plan"], cwd=repo, env={**env, "KNOWLEDGE_AGENT_HOME": str(kb)}
            ),
        )
        yield case(
            "search --rerank --data-dir ~/kb",
            lambda: cli(
                ["--data-dir", str(kb), "search", "quarterly plan", "--rerank"], cwd=repo, env=env
            ),
        )
        yield case(
            "add docs inside the untrusted clone", lambda: cli(["add", "docs"], cwd=repo, env=env)
        )
        yield case(
            "search inside the untrusted clone",
            lambda: cli(["search", "lighthouse"], cwd=repo, env=env),
        )
        synced = cli(["sync", "--json"], cwd=repo, env=env)
        grep = cli(["grep", "redteamprivate"], cwd=repo, env=env)
        outside = "redteamprivate" in grep.stdout
        yield Case(
            "project_file",
            "[[scan]] outside the clone + sync",
            not outside and "Traceback" not in synced.stderr,
            f"sync exit {synced.returncode}; the outside file collected: {outside}",
        )
        # Trusted with the user's consent, then edited by a pull: untrusted again.
        trusted = cli(["trust", str(project)], cwd=repo, env=env)
        with project.open("a", encoding="utf-8") as handle:
            handle.write('\n[doc_types]\nnotes = "guide"\n')
        stolen_before = (root / "stolen-kb").exists()
        before = sent()
        edited = cli(["search", "lighthouse"], cwd=repo, env=env)
        yield Case(
            "project_file",
            "trusted, then edited: search inside the clone",
            trusted.returncode == 0
            and sent() == before
            and not stolen_before
            and "changed since it was trusted" in edited.stderr,
            f"trust exit {trusted.returncode}; {sent() - before} requests after the edit",
        )
        # Trusted: the project's own data folder, yet still never a folder the user chose.
        cli(["trust", str(project)], cwd=repo, env=env)
        before = sent()
        cli(["--data-dir", str(kb), "search", "quarterly plan"], cwd=repo, env=env)
        yield Case(
            "project_file",
            "trusted file, search --data-dir ~/kb",
            sent() == before,
            f"{sent() - before} requests to the endpoint",
        )


# -- folder walks ----------------------------------------------------------------------------


def walk_cases(work: Path) -> Iterator[Case]:
    from knowledge_agent import KnowledgeAgentCore

    root = work / "walk"
    write(root / "secrets" / "id.md", "# Key\n\nredteamlinked private key\n")
    docs = root / "docs"
    write(docs / "guide.md", "# Guide\n\nHow to deploy.\n")
    (docs / "linked-file.md").symlink_to(root / "secrets" / "id.md")
    (docs / "linked-folder").symlink_to(root / "secrets", target_is_directory=True)
    with KnowledgeAgentCore(root / "kb", workers=1) as core:
        report = core.collect_knowledge(docs)
        found = core.text_search("redteamlinked")
    counted = sum(g.count for g in report.skip_summary() if g.reason == "link leaving the folder")
    yield Case(
        "walk",
        "links to a file and a folder outside the collected folder",
        not found and counted == 2,
        f"{len(found)} lines of the outside file indexed; {counted} links reported",
    )
    done = cli(["--data-dir", str(root / "kb2"), "add", str(docs)], cwd=root)
    shown = cli(["--data-dir", str(root / "kb2"), "grep", "redteamlinked"], cwd=root)
    yield Case(
        "walk",
        "knowledge-agent add of a folder with links leaving it",
        done.returncode == 0 and "redteamlinked" not in shown.stdout,
        f"add exit {done.returncode}; {one_line(done.stdout + done.stderr)}",
    )


# -- patterns ----------------------------------------------------------------------------------

REDOS = "(a+)+$"  # exponential in re; the regex module's own checks often cut it short
SLOW_REGEX = "(a|aa)+$"  # exponential in both: only the matching-time budget ends it
REDOS_LINE = "a" * 32 + "!"
HUGE_GLOB = "[" * 50_000


def _pattern_base(data_dir: str) -> None:
    from knowledge_agent import KnowledgeAgentCore

    with KnowledgeAgentCore(data_dir, workers=1) as core:
        core.add_text(f"# Notes\n\n{REDOS_LINE}\nplain words\n", title="Notes", kb="notes")


def bounded_pattern(data_dir: str, kind: str) -> dict[str, Any]:
    """In a child: one hostile pattern through one tool; what it answered and how long."""
    from knowledge_agent import KnowledgeAgentCore
    from knowledge_agent.errors import KnowledgeAgentError
    from knowledge_agent.server import mcp_tools

    calls: dict[str, Callable[[Any], Any]] = {
        "knowledge_text_search regex": lambda core: mcp_tools.knowledge_text_search(
            core, knowledge_base="notes", keyword=REDOS, regex=True
        ),
        "list_items path_glob": lambda core: mcp_tools.list_items(core, path_glob=HUGE_GLOB),
        "knowledge_text_search regex (a|aa)+$": lambda core: mcp_tools.knowledge_text_search(
            core, knowledge_base="notes", keyword=SLOW_REGEX, regex=True
        ),
        "search_code file_patterns": lambda core: mcp_tools.search_code(
            core, "notes", file_patterns=HUGE_GLOB
        ),
        "knowledge_semantic_search source_keyword": lambda core: (
            mcp_tools.knowledge_semantic_search(
                core, knowledge_base="notes", query="notes", source_keyword=HUGE_GLOB
            )
        ),
        "core.search path_glob": lambda core: core.search("notes", path_glob=HUGE_GLOB),
    }
    with KnowledgeAgentCore(data_dir, workers=1) as core:
        started = time.perf_counter()
        try:
            calls[kind](core)
            answer = "answered"
        except KnowledgeAgentError as exc:
            answer = f"{type(exc).__name__}: {exc}"
        seconds = time.perf_counter() - started
    return {"answer": answer, "seconds": seconds, "peak_mb": peak_mb()}


PATTERN_KINDS = (
    "knowledge_text_search regex",
    "list_items path_glob",
    "knowledge_text_search regex (a|aa)+$",
    "search_code file_patterns",
    "knowledge_semantic_search source_keyword",
    "core.search path_glob",
)
PATTERN_BOUND_S = 5.0  # the regex budget is 2 s; a refused glob costs nothing


def pattern_cases(work: Path) -> Iterator[Case]:
    data_dir = work / "patterns" / "kb"
    data_dir.parent.mkdir(parents=True)
    _pattern_base(str(data_dir))
    for kind in PATTERN_KINDS:
        child = run_child(bounded_pattern, str(data_dir), kind, timeout=120)
        if not child.ok:
            yield Case("patterns", kind, False, child.describe(), child.seconds)
            continue
        value = child.value
        held = value["seconds"] <= PATTERN_BOUND_S
        yield Case(
            "patterns",
            kind,
            held,
            one_line(value["answer"]),
            round(value["seconds"], 3),
            round(value["peak_mb"], 1),
            PATTERN_BOUND_S,
        )
    for name, args in (
        ("knowledge-agent grep --regex (a|aa)+$", ["grep", "--regex", SLOW_REGEX]),
        ("knowledge-agent multi-get with a 50,000-character glob", ["multi-get", HUGE_GLOB]),
    ):
        started = time.perf_counter()
        done = cli(["--data-dir", str(data_dir), *args], cwd=work)
        seconds = time.perf_counter() - started
        clean = done.returncode in (1, 2) and "Traceback" not in done.stderr
        yield Case(
            "patterns",
            name,
            clean and seconds <= PATTERN_BOUND_S + 5,  # plus the command's own start-up
            f"exit {done.returncode}: {one_line(done.stderr)}",
            round(seconds, 3),
            bound_s=PATTERN_BOUND_S + 5,
        )


# -- the run -----------------------------------------------------------------------------------

SURFACES: dict[str, Callable[[Path], Iterator[Case]]] = {
    "project_file": project_file_cases,
    "walk": walk_cases,
    "patterns": pattern_cases,
}


def run_red_team(work: Path, *, quick: bool) -> dict[str, Any]:
    """Every surface's cases; a surface whose harness breaks becomes one failed case."""
    cases: list[Case] = []
    for surface, make in SURFACES.items():
        log(f"  red team: {surface}")
        try:
            for case in make(work):
                cases.append(case)
                if not case.held:
                    log(f"    NOT HELD: {case.name}: {case.detail}")
        except Exception as exc:  # the harness, not the package: reported as a failed case
            cases.append(Case(surface, "the surface could not run", False, repr(exc)))
    return {"cases": [asdict(case) for case in cases]}
