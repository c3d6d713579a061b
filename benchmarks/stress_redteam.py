"""Red-team cases against the trust boundary, each an attack and the outcome that means it held.

The surfaces, as the design notes draw the boundary:

mcp           tool arguments from an agent: ``url`` and ``path`` reaching local files, symlinks
              out of a root, bad argument types and values, a URL outside the allowed prefix;
http          ``serve --http`` bound beyond loopback: no token, a wrong token, a foreign Origin;
project_file  a ``.knowledge-agent.toml`` in a cloned repository naming an endpoint, a secret,
              a data folder or a scan path outside it, used with ``--data-dir``,
              ``$KNOWLEDGE_AGENT_HOME`` or from inside the clone, and edited after ``trust``;
walk          folder walks and links that leave the folder;
files         a page nested 10,000 deep, in two shapes (converted in bounded time, flattened);
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
from contextlib import contextmanager
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
    bounded: str = ""  # the kind of bounded case it is, for the summary rows


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
    command = [sys.executable, "-m", "knowledge_agent", *args]
    try:
        return subprocess.run(
            command, cwd=cwd, env=environ, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:  # a figure, not a harness failure
        return subprocess.CompletedProcess(command, -9, "", f"killed after {timeout:g} s")


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def one_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:200] if lines else ""


# -- an agent's tool arguments ----------------------------------------------------------------

HOSTILE_VALUES: tuple[Any, ...] = (
    None, True, -1, 10**18, 1.5, float("nan"), "x", "", "\x00", "a" * 100_000, [], ["x"] * 10_000,
    {"a": 1},
)  # fmt: skip


def mcp_child(work: str) -> list[dict[str, Any]]:
    """In a child: every attack on the tools of a server started with one root and one URL
    prefix; per case whether it held and what came back."""
    import inspect

    from knowledge_agent import KnowledgeAgentCore
    from knowledge_agent.crawl import UrlPolicy
    from knowledge_agent.errors import KnowledgeAgentError, NotFoundError
    from knowledge_agent.server import mcp_tools

    base = Path(work)
    root = base / "root"
    secret = write(base / "outside" / "secret.md", "# Secret\n\nredteamsecret token\n")
    write(root / "docs" / "guide.md", "# Guide\n\nHow to deploy.\n")
    (root / "docs" / "link.md").symlink_to(secret)
    (root / "linked").symlink_to(secret.parent, target_is_directory=True)
    roots = mcp_tools.resolve_roots([root])
    policy = UrlPolicy(("http://127.0.0.1:9/docs",))
    results: list[dict[str, Any]] = []
    with KnowledgeAgentCore(base / "kb", workers=1) as core:
        mcp_tools.add_knowledge(core, path=str(root / "docs"), roots=roots)

        def leaked() -> bool:
            return bool(core.text_search("redteamsecret"))

        def attempt(name: str, **arguments: Any) -> None:
            before = {item.id for item in core.list_items(limit=1_000)}
            try:
                answer = mcp_tools.add_knowledge(core, roots=roots, url_policy=policy, **arguments)
                outcome = f"answered: processed {answer.get('processed')}"
                held: bool | None = None
            except KnowledgeAgentError as exc:
                outcome = f"{type(exc).__name__}: {exc}"
                held = None
            except Exception as exc:  # not the project's error: the case did not hold
                outcome, held = repr(exc), False
            added = [item.id for item in core.list_items(limit=1_000) if item.id not in before]
            if held is None:
                held = not leaked() and (not added or "url" not in arguments)
            for item_id in added:  # each case starts from the same knowledge base
                core.delete_knowledge_item(item_id)
            results.append({"name": name, "held": held, "detail": outcome[:200]})

        for value in (
            "/etc/passwd",
            str(secret),
            "~/.bashrc",
            f"file://{secret}",
            "file:///etc/passwd",
            "../outside/secret.md",
            str(secret.parent),
            str(root / "docs" / "guide.md"),
            "ftp://127.0.0.1/docs/x",
            "javascript:alert(1)",
            "http://169.254.169.254/latest/meta-data/",
            "http://127.0.0.1:9/docs-private/x",
            "http://127.0.0.1:9/docs/..%2F..%2Fetc%2Fpasswd",
        ):
            attempt(f"add_knowledge url={value[:60]}", url=value)
        for value in (
            str(secret),
            "../outside/secret.md",
            str(root / "docs" / "link.md"),
            str(root / "linked"),
            str(root / "linked" / "secret.md"),
            str(root / "docs") + "\x00",
            "~/../../etc/passwd",
            "x" * 5_000,
            f"kb:0:{secret}#L1-L2@000000000000",
        ):
            attempt(f"add_knowledge path={value[:60]!r}", path=value)
        # Every argument of every tool, with every hostile value: an answer or an error of the
        # project's tree that names the argument.
        for tool in mcp_tools.TOOLS:
            parameters = [
                name for name in inspect.signature(tool).parameters if name not in ("core",)
            ]
            if tool is mcp_tools.add_knowledge or not parameters:
                continue
            required = {"query": "deploy", "knowledge_base": "default", "keyword": "deploy",
                        "chunk_id": "x", "item_id": "x"}  # fmt: skip
            bad: list[str] = []
            calls = 0
            for parameter in parameters:
                for value in HOSTILE_VALUES:
                    arguments = {
                        name: required[name]
                        for name in parameters
                        if name in required and name != parameter
                    }
                    arguments[parameter] = value
                    calls += 1
                    try:
                        tool(core, **arguments)
                    except KnowledgeAgentError as exc:
                        if parameter not in str(exc) and not isinstance(exc, NotFoundError):
                            bad.append(f"{parameter}={value!r:.30}: {exc}"[:160])
                    except Exception as exc:
                        bad.append(f"{parameter}={value!r:.30}: {type(exc).__name__}: {exc}"[:160])
            shown = "; ".join(bad[:3]) or "every one answered or named"
            results.append(
                {
                    "name": f"{tool.__name__}: {len(parameters)} arguments, hostile values",
                    "held": not bad,
                    "detail": f"{calls} calls; {shown}",
                }
            )
    return results


def mcp_cases(work: Path) -> Iterator[Case]:
    folder = work / "mcp"
    folder.mkdir(parents=True)
    child = run_child(mcp_child, str(folder), timeout=900)
    if not child.ok:
        yield Case("mcp", "the tools could not be attacked", False, child.describe())
        return
    for result in child.value:
        yield Case("mcp", result["name"], result["held"], result["detail"])


# -- serve --http ------------------------------------------------------------------------------


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def serving(args: list[str], env: dict[str, str], cwd: Path) -> Iterator[subprocess.Popen[str]]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("KNOWLEDGE_AGENT_")}
    environ.update(PYTHONPATH=str(_PROJECT_ROOT), NO_COLOR="1", **env)
    process = subprocess.Popen(
        [sys.executable, "-m", "knowledge_agent", *args],
        cwd=cwd,
        env=environ,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        yield process
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _wait_listening(port: int, process: subprocess.Popen[str]) -> bool:
    import socket

    for _ in range(300):  # about 30 s
        if process.poll() is not None:
            return False
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return True
        except OSError:
            time.sleep(0.1)
    return False


def http_cases(work: Path) -> Iterator[Case]:
    from http_probe import status

    folder = work / "http"
    kb = folder / "kb"
    from knowledge_agent import KnowledgeAgentCore

    with KnowledgeAgentCore(kb, workers=1) as core:
        core.add_text("# Ops\n\nRoll back a release with deploy undo.", title="Ops")
    token = "red-team-token-0123456789abcdef"
    port = _free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    args = ["--data-dir", str(kb), "serve", "--http", f"127.0.0.1:{port}", "--token-env", "KA_T"]
    with serving(args, {"KA_T": token}, folder) as process:
        if not _wait_listening(port, process):
            yield Case("http", "serve --http --token-env", False, "the server did not start")
        else:
            bearer = f"Bearer {token}"
            for name, headers, expected in (
                ("no token", {}, 401),
                ("a wrong token", {"Authorization": f"Bearer {token[:-1]}x"}, 401),
                ("the token as Basic", {"Authorization": f"Basic {token}"}, 401),
                ("the token, a foreign Origin", {"Authorization": bearer,
                                                 "Origin": "http://evil.example"}, 403),
                ("the token, a foreign Host", {"Authorization": bearer,
                                               "Host": f"evil.example:{port}"}, 421),
                ("the token (the control)", {"Authorization": bearer}, 200),
            ):  # fmt: skip
                got = status(url, **headers)
                yield Case("http", f"--token-env on loopback: {name}", got == expected,
                           f"HTTP {got}, expected {expected}")  # fmt: skip
    stdout, _ = process.communicate()
    yield Case("http", "the token never on stdout", token not in stdout, "")
    port = _free_port()
    remote = ["--data-dir", str(kb), "serve", "--http", f"0.0.0.0:{port}"]
    refused = cli(remote, cwd=folder)
    yield Case(
        "http",
        "0.0.0.0 without --allow-remote",
        refused.returncode != 0 and "Traceback" not in refused.stderr,
        one_line(refused.stderr),
    )
    with serving([*remote, "--allow-remote"], {}, folder) as process:
        listening = _wait_listening(port, process)
        got = status(f"http://127.0.0.1:{port}/mcp") if listening else -1
    _, stderr = process.communicate()
    warned = "other machines" in stderr
    yield Case(
        "http",
        "0.0.0.0 --allow-remote without --token-env: a request without the token",
        got == 401 and warned,
        f"HTTP {got}; warning on stderr: {warned}",
    )


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


GITIGNORE_BOUND_S = 10.0  # the command's start-up and a tiny folder

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
    slow = root / "slow-gitignore"
    write(slow / ".gitignore", "*a" * 10 + "b\n")
    write(slow / ("a" * 60 + "c.md"), "# Long name\n\nredteamslowname\n")
    started = time.perf_counter()
    done = cli(["--data-dir", str(root / "kb3"), "add", str(slow)], cwd=root, timeout=120)
    seconds = time.perf_counter() - started
    yield Case(
        "walk",
        "a .gitignore line that backtracks, beside a 60-character file name",
        done.returncode == 0 and seconds <= GITIGNORE_BOUND_S,
        f"add exit {done.returncode}; {one_line(done.stderr)[:120]}",
        round(seconds, 2),
        bound_s=GITIGNORE_BOUND_S,
        bounded="backtracking .gitignore",
    )
    done = cli(["--data-dir", str(root / "kb2"), "add", str(docs)], cwd=root)
    shown = cli(["--data-dir", str(root / "kb2"), "grep", "redteamlinked"], cwd=root)
    yield Case(
        "walk",
        "knowledge-agent add of a folder with links leaving it",
        done.returncode == 0 and "redteamlinked" not in shown.stdout,
        f"add exit {done.returncode}; {one_line(done.stdout + done.stderr)}",
    )


DEEP_HTML_BOUND_S = 5.0


def deep_html_child(shape: str) -> dict[str, Any]:
    """In a child: one page nested 10,000 deep converted; its time, size and peak memory."""
    from knowledge_agent.processors import process_bytes

    depth = 10_000
    opening, closing = {
        "div": ("<div>", "</div>"),
        "blockquote/ul/li/span": (
            "<blockquote><ul><li><span>",
            "</span></li></ul></blockquote>",
        ),
    }[shape]
    page = f"<html><body>{opening * depth}bottom{closing * depth}</body></html>".encode()
    started = time.perf_counter()
    document = process_bytes(page, "deep.html")
    seconds = time.perf_counter() - started
    return {
        "seconds": seconds,
        "found": "bottom" in document.content,
        "chars": len(document.content),
        "peak_mb": peak_mb(),
    }


def file_cases(work: Path) -> Iterator[Case]:
    for shape in ("div", "blockquote/ul/li/span"):
        child = run_child(deep_html_child, shape, timeout=300)
        name = f"HTML nested 10,000 deep ({shape})"
        if not child.ok:
            yield Case("files", name, False, child.describe())
            continue
        value = child.value
        yield Case(
            "files", name,
            value["found"] and value["chars"] < 1000 and value["seconds"] <= DEEP_HTML_BOUND_S,
            f"text kept: {value['found']}, {value['chars']} characters (flattened)",
            round(value["seconds"], 3), round(value["peak_mb"], 1), DEEP_HTML_BOUND_S,
            bounded="deep HTML",
        )  # fmt: skip


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
            bounded="ReDoS" if "regex" in kind else "50K glob",
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
            bounded="ReDoS" if "regex" in name else "50K glob",
        )


# -- a hostile site ---------------------------------------------------------------------------

REQUEST_TIMEOUT = 5.0  # the crawls' request deadline in these cases
SEARCH_GOAL_S = 1.0  # a search during a crawl waits for no network I/O
TOOL_WORK_S = 1.0  # past its deadline, a crawl stores what it got and indexes it


def crawl_child(
    data_dir: str,
    url: str,
    prefixes: list[str] | None,
    options: dict[str, Any],
    search_during: bool,
) -> dict[str, Any]:
    """In a child: collect ``url`` (under an agent's policy when ``prefixes`` is given), with
    searches from another thread meanwhile; the report, the time, the slowest search and the
    peak memory."""
    import threading

    from knowledge_agent import KnowledgeAgentCore
    from knowledge_agent.crawl import UrlPolicy
    from knowledge_agent.errors import KnowledgeAgentError

    waits: list[float] = []
    done = threading.Event()
    with KnowledgeAgentCore(data_dir, workers=1) as core:
        core.add_text("# Base\n\nbaseline words before the crawl", title="Base")
        core.search("baseline")

        def search() -> None:
            while not done.wait(0.2):
                started = time.perf_counter()
                core.search("baseline words", limit=3)
                waits.append(time.perf_counter() - started)

        searcher = threading.Thread(target=search, daemon=True)
        if search_during:
            searcher.start()
        policy = UrlPolicy(tuple(prefixes)) if prefixes is not None else None
        started = time.perf_counter()
        try:
            report = core.collect_knowledge(url, crawl=options, url_policy=policy).to_dict()
            error = ""
        except KnowledgeAgentError as exc:
            report, error = {}, f"{type(exc).__name__}: {exc}"
        seconds = time.perf_counter() - started
        done.set()
        if search_during:
            searcher.join(30)
    return {
        "report": report,
        "error": error,
        "seconds": seconds,
        "search_max_s": max(waits, default=0.0),
        "searches": len(waits),
        "peak_mb": peak_mb(),
    }


def _reasons(answer: dict[str, Any]) -> str:
    report = answer["report"]
    issues = [*report.get("failed", []), *report.get("skipped", [])]
    reasons = sorted({str(issue.get("reason", "")) for issue in issues})
    return "; ".join([answer["error"], *reasons, *report.get("stopped_by", [])]).strip("; ")


def crawl_cases(work: Path) -> Iterator[Case]:
    from hostile_server import HostileServer

    root = work / "crawl"
    root.mkdir(parents=True)
    quick = {"respect_robots": False, "timeout": REQUEST_TIMEOUT, "max_depth": 0}
    numbers = iter(range(1_000))

    def crawl(
        url: str,
        prefixes: list[str] | None,
        options: dict[str, Any],
        *,
        search_during: bool = False,
    ) -> dict[str, Any] | str:
        child = run_child(
            crawl_child,
            str(root / f"kb{next(numbers)}"),
            url,
            prefixes,
            options,
            search_during,
            timeout=600,
        )
        return child.value if child.ok else child.describe()

    with HostileServer() as site, HostileServer() as other:
        agent = [site.url("/docs")]

        # Deadlines: a tool call ends by its deadline (plus its own second of storing and
        # indexing); searches from another thread meanwhile never wait for the network.
        site.dribble("/docs/slow.html", size=400, interval=0.8)
        site.stall("/docs/stalled.html", 120)
        paths = [f"/docs/slow/{n}.html" for n in range(40)]
        site.page("/docs/many.html", "".join(f'<a href="{p}">{p}</a>' for p in paths))
        for path in paths:
            site.dribble(path, size=400, interval=0.8)
        many = {**quick, "max_depth": 1, "concurrency": 2, "max_time": 8.0}
        searches: list[float] = []
        for name, path, options, deadline, expect in (
            ("a page sending one byte every 0.8 s", "/docs/slow.html", quick,
             REQUEST_TIMEOUT, "timed out"),
            ("a page that sends its headers, then nothing", "/docs/stalled.html", quick,
             REQUEST_TIMEOUT, "timed out"),
            ("40 dribbling pages under max_time 8 s", "/docs/many.html", many, 8.0, "max_time"),
        ):  # fmt: skip
            answer = crawl(site.url(path), agent, options, search_during=True)
            if isinstance(answer, str):
                yield Case("crawl", name, False, answer)
                continue
            searches.append(answer["search_max_s"])
            bound = deadline + TOOL_WORK_S
            # A first crawl whose start page fails is one error naming why (nothing kept).
            clear = not answer["error"] or expect in answer["error"]
            held = clear and answer["seconds"] <= bound and expect in _reasons(answer)
            yield Case(
                "crawl", name, held, _reasons(answer)[:200], round(answer["seconds"], 2),
                round(answer["peak_mb"], 1), bound, bounded="slow page",
            )  # fmt: skip
        if searches:
            yield Case(
                "crawl",
                "searches from another thread during those crawls",
                max(searches) <= SEARCH_GOAL_S,
                "the slowest of the searches made every 0.2 s while the crawls waited",
                round(max(searches), 3),
                bound_s=SEARCH_GOAL_S,
                bounded="search during a stalled crawl",
            )

        # Size: sitemaps and bombs stay within memory whatever they claim.
        site.huge_sitemap("/docs/sitemap.xml", 1_000_000)
        site.huge_sitemap("/docs/sitemap.xml.gz", 1_000_000, gzipped=True)
        for n in range(3):
            site.huge_sitemap(f"/docs/part{n}.xml", 1_000_000)
        site.sitemap_index("/docs/index.xml", [site.url(f"/docs/part{n}.xml") for n in range(3)])
        site.gzip_bomb("/docs/bomb.html", 1024)
        site.gzip_bomb("/docs/bomb.xml.gz", 1024, content_encoding=False)
        urls = [site.url("/docs/a.html")]
        site.page("/docs/a.html", "<html><body><p>alpha</p></body></html>")
        site.utf16_sitemap("/docs/le.xml", urls, laughs=True)
        site.utf16_sitemap("/docs/be.xml", urls, big_endian=True, laughs=True)
        sized = {"respect_robots": False, "timeout": 30.0, "max_pages": 200, "concurrency": 8}
        # The agent's prefix is the site's folder, so the listed /page/N.html are out of
        # scope for it: the sitemaps are crawled under the user's own policy.
        for name, path, user in (
            ("a sitemap of 1M URLs, max_pages 200", "/docs/sitemap.xml", True),
            ("a gzipped sitemap of 1M URLs, max_pages 200", "/docs/sitemap.xml.gz", True),
            ("an index of three 1M-URL sitemaps, max_pages 200", "/docs/index.xml", True),
            ("a 1 GiB gzip bomb as Content-Encoding", "/docs/bomb.html", False),
            ("a 1 GiB gzip bomb as a .xml.gz sitemap", "/docs/bomb.xml.gz", False),
            ("a UTF-16 LE sitemap with a billion laughs", "/docs/le.xml", False),
            ("a UTF-16 BE sitemap with a billion laughs", "/docs/be.xml", False),
        ):
            answer = crawl(site.url(path), None if user else agent, sized)
            if isinstance(answer, str):
                yield Case("crawl", name, False, answer)
                continue
            processed = answer["report"].get("processed", 0)
            # The sitemaps are used (max_pages pages crawled), the bombs and laughs are not.
            held = answer["peak_mb"] <= MEMORY_GOAL_MB and processed == (200 if user else 0)
            yield Case(
                "crawl", name, held, f"{processed} pages; {_reasons(answer)[:160]}",
                round(answer["seconds"], 2), round(answer["peak_mb"], 1),
                memory_goal_mb=MEMORY_GOAL_MB,
                bounded="gzip bomb" if "bomb" in name else "sitemap",
            )  # fmt: skip

        # The policy on every hop: redirects, robots.txt, look-alike prefixes, encodings.
        other.page("/robots.txt", "User-agent: *\nAllow: /\n")
        other.page("/secret.html", "<html><body>secret</body></html>")
        site.redirect("/robots.txt", other.url("/robots.txt"))
        site.page("/docs/r.html", "<html><body><p>robots</p></body></html>")
        site.redirect("/docs/away.html", other.url("/secret.html"))
        site.page("/docs-private/secret.html", "<html><body>private</body></html>")
        site.page("/secret.html", "<html><body>secret</body></html>")
        site.page(
            "/docs/links.html",
            '<a href="/docs-private/secret.html">a</a> <a href="/docs/..%2Fsecret.html">b</a>'
            ' <a href="/docs/%2e%2e/secret.html">c</a> <a href="/docs/..%5Csecret.html">d</a>',
        )
        site.redirect("/docs/meta.html", "http://169.254.169.254/latest/meta-data/")
        site.redirect_chain("/docs/chain.html", 30, site.url("/docs/r.html"))
        site.redirect("/user/start.html", f"http://localhost:{other.port}/secret.html")
        walk = {"respect_robots": False, "timeout": REQUEST_TIMEOUT, "max_depth": 1}
        for name, url, prefixes, options, watched in (
            (
                "robots.txt redirecting to another port",
                site.url("/docs/r.html"),
                agent,
                {**quick, "respect_robots": True},
                lambda: other.total_hits,
            ),
            (
                "a page redirecting to another port",
                site.url("/docs/away.html"),
                agent,
                quick,
                lambda: other.total_hits,
            ),
            (
                "a link to /docs-private/ under the prefix /docs",
                site.url("/docs/links.html"),
                agent,
                walk,
                lambda: site.hits("/docs-private/secret.html"),
            ),
            (
                "links with ..%2F, %2e%2e and ..%5C out of /docs",
                site.url("/docs/links.html"),
                agent,
                walk,
                lambda: site.hits("/secret.html"),
            ),
            (
                "a user's crawl redirected to localhost on another port",
                site.url("/user/start.html"),
                None,
                quick,
                lambda: other.total_hits,
            ),
        ):
            before = watched()
            answer = crawl(url, prefixes, options)
            reached = watched() - before
            detail = answer if isinstance(answer, str) else _reasons(answer)[:160]
            yield Case(
                "crawl", name, reached == 0 and not isinstance(answer, str),
                f"{reached} requests reached the target; {detail}",
            )  # fmt: skip
        public = [*agent, "http://"]  # the site's folder, and every public http URL
        for name, url, prefixes, expect in (
            ("a redirect to 169.254.169.254", site.url("/docs/meta.html"), agent, "refused"),
            (
                "a redirect to 169.254.169.254, every public http URL allowed",
                site.url("/docs/meta.html"),
                public,
                "private or reserved",
            ),
            ("a chain of 30 redirects", site.url("/docs/chain.html"), agent, "too many redirects"),
            ("a start URL outside the prefix", other.url("/secret.html"), agent, "not under"),
        ):
            before = other.total_hits
            answer = crawl(url, prefixes, quick)
            detail = answer if isinstance(answer, str) else _reasons(answer)
            yield Case("crawl", name, expect in detail and other.total_hits == before, detail[:160])


# -- damage ----------------------------------------------------------------------------------


def _splice(path: Path) -> None:
    """Bytes of garbage written into the middle of a file (its size unchanged)."""
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 16] = b"\xde\xad\xbe\xef" * 4
    path.write_bytes(bytes(data[: len(path.read_bytes())]))


def _deep_json(path: Path) -> None:
    path.write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


DAMAGES: tuple[tuple[str, str, Callable[[Path], None]], ...] = (
    ("bytes spliced into a keyword segment (items)", "index/whoosh/items/*.seg", _splice),
    ("bytes spliced into a keyword segment (chunks)", "index/whoosh/chunks/*.seg", _splice),
    ("a keyword TOC cut in half", "index/whoosh/chunks/_MAIN_*.toc", _truncate),
    ("bytes spliced into a TF-IDF segment", "index/tfidf/chunks-*.npz", _splice),
    ("a TF-IDF manifest cut in half", "index/tfidf/manifest.json", _truncate),
    ("a state file nested 100,000 deep", "index/whoosh/state.json", _deep_json),
)


def damage_cases(work: Path) -> Iterator[Case]:
    from knowledge_agent.backends.local.folder_lock import FolderLock

    root = work / "damage"
    docs = root / "docs"
    for number in range(12):
        write(docs / f"d{number}.md", f"# Doc {number}\n\nalpha bravo redteamdoc{number} words\n")
    for name, pattern, harm in DAMAGES:
        kb = root / f"kb-{len(list(root.glob('kb-*')))}"
        cli(["--data-dir", str(kb), "add", str(docs)], cwd=root)
        targets = sorted(kb.glob(pattern))
        if not targets:
            yield Case("damage", name, False, f"no file matches {pattern}")
            continue
        for target in targets:
            harm(target)
        # Another process writing: the search must refuse, naming the repair, not answer empty.
        holder = FolderLock(kb)
        holder.acquire()
        try:
            busy = cli(["--data-dir", str(kb), "search", "redteamdoc3"], cwd=root)
        finally:
            holder.release()
        checked = cli(["--data-dir", str(kb), "check"], cwd=root)
        repaired = cli(["--data-dir", str(kb), "check", "--repair"], cwd=root)
        after = cli(["--data-dir", str(kb), "search", "redteamdoc3", "--json"], cwd=root)
        found = after.returncode == 0 and "d3.md" in after.stdout
        busy_ok = ("d3.md" in busy.stdout and busy.returncode == 0) or (
            busy.returncode == 1 and "check --repair" in busy.stderr
        )
        clean = all("Traceback" not in run.stderr for run in (busy, checked, repaired, after))
        held = checked.returncode == 1 and repaired.returncode == 0 and found and busy_ok and clean
        detail = (
            f"check exit {checked.returncode}: {one_line(checked.stdout + checked.stderr)[:90]}; "
            f"search with the lock held: exit {busy.returncode} {one_line(busy.stderr)[:90]}; "
            f"after --repair found: {found}"
        )
        yield Case("damage", name, held, detail)
        # The lock free: a search recovers on its own (or names the repair).
        kb2 = root / f"kb-{len(list(root.glob('kb-*')))}"
        cli(["--data-dir", str(kb2), "add", str(docs)], cwd=root)
        for target in sorted(kb2.glob(pattern)):
            harm(target)
        alone = cli(["--data-dir", str(kb2), "search", "redteamdoc3", "--json"], cwd=root)
        recovered = alone.returncode == 0 and "d3.md" in alone.stdout
        named = alone.returncode == 1 and "check --repair" in alone.stderr
        yield Case(
            "damage",
            f"{name}: a search with the lock free",
            (recovered or named) and "Traceback" not in alone.stderr,
            f"exit {alone.returncode}; {'recovered' if recovered else one_line(alone.stderr)}",
        )


# -- the run -----------------------------------------------------------------------------------

SURFACES: dict[str, Callable[[Path], Iterator[Case]]] = {
    "mcp": mcp_cases,
    "http": http_cases,
    "project_file": project_file_cases,
    "walk": walk_cases,
    "files": file_cases,
    "patterns": pattern_cases,
    "crawl": crawl_cases,
    "damage": damage_cases,
}


def run_red_team(work: Path) -> dict[str, Any]:
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
