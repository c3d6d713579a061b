"""The ``knowledge-agent`` command: a thin click layer over :class:`KnowledgeAgentCore`.

Each command parses its options, opens the knowledge base (lazily, closed at the end),
calls one or two core methods and prints the result through :mod:`knowledge_agent.cli_render`.
Errors are mapped in one place (:class:`KnowledgeAgentGroup`): anything deriving from
``KnowledgeAgentError`` becomes ``Error: …`` on stderr with exit code 1 (a full disk is named
as such); usage errors exit with 2; a traceback is printed only with ``--debug``. Ctrl-C
exits with 130 after one line, for ``add``, ``sync`` and ``watch`` saying how many files were
committed (each file is committed on its own, so a re-run finishes the rest).

``--json`` output is one top-level JSON object per command (``watch`` prints one per line):

=============  ==========================================================================
command        shape
=============  ==========================================================================
search         {"query", "mode", "results": [result_view()]} (knowledge_agent.models.result_view)
grep           {"pattern", "regex", "case_sensitive", "matches": [TextMatch.to_dict()]}
get            {"items": [KnowledgeItem.to_dict()]};
               with --chunk: {"chunk", "item" (no content), "before": [...], "after": [...]}
list           {"count", "items": [KnowledgeItem.to_dict() without "content"]}
stats          {"status": IndexStatus.to_dict(), "knowledge_bases": [KnowledgeBaseInfo],
                "config_file"}
check          IndexStatus.to_dict(): {"data_dir", "items", "chunks", …, "consistent",
               "problems", "damaged": [{"index", "file", "problem"}], "repaired"}
add, sync      CollectReport.to_dict(): {"kb", "processed", "unchanged", "skipped": [{"path",
               "reason"}], "skipped_summary": {"total", "groups": [{"kind", "reason",
               "count", "extensions"}]}, "failed": [...], "removed", "chunks_added",
               "chunks_removed", "bytes_processed", "duration_s", "item_ids"}
watch          one CollectReport.to_dict() per line, for the first pass and every update
remove         {"target", "kind": "item" | "path", "removed"}
rebuild        {"chunks_indexed"}
kb list        {"knowledge_bases": [KnowledgeBaseInfo.to_dict()]}
kb create,     {"knowledge_base": KnowledgeBaseInfo.to_dict()}: {"name", "description",
kb describe    "created_at", "items", "chunks", "sources", "roots", "last_indexed_at"}
kb remove      {"name", "items_removed"}
=============  ==========================================================================
"""

from __future__ import annotations

import errno
import functools
import io
import logging
import os
import re
import secrets
import sqlite3
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from datetime import time as day_time
from functools import cached_property
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import click
from rich.console import Console

from knowledge_agent import cli_render as render
from knowledge_agent.cli_checks import check_filters, check_values
from knowledge_agent.cli_crawl import crawl_options, crawl_options_from, given, is_url
from knowledge_agent.cli_formats import FORMATS, distinct_paths, write_results
from knowledge_agent.core.text_search import compile_pattern, linked
from knowledge_agent.errors import (
    ConfigError,
    IngestError,
    KnowledgeAgentError,
    NotFoundError,
    QueryError,
)
from knowledge_agent.extras import missing_extra
from knowledge_agent.ingest.git_state import git_state_of
from knowledge_agent.ingest.report import CollectInterrupted, CollectProgress, CollectReport
from knowledge_agent.ingest.walker import WalkOptions
from knowledge_agent.models.status import ChunkContext
from knowledge_agent.patterns import check_glob, glob_regex
from knowledge_agent.settings import (
    CONFIG_FILE_NAME,
    LOCAL_DATA_DIR,
    Settings,
    find_project,
    resolve_settings,
    trust_config_file,
    write_default_config,
)
from knowledge_agent.storage import DATABASE_FILE
from knowledge_agent.storage.sources import KnowledgeBaseInfo, SourceRoot, path_to_db
from knowledge_agent.trust import TrustStore, user_config_dir

if TYPE_CHECKING:
    from knowledge_agent.core.knowledge_agent_core import KnowledgeAgentCore
    from knowledge_agent.core.packing import PackedContext
    from knowledge_agent.ingest.collector import ProgressCallback
    from knowledge_agent.models import KnowledgeItem, SearchFacets, SearchResult

    if sys.version_info >= (3, 11):
        from importlib.resources.abc import Traversable
    else:  # pragma: no cover - Python 3.10
        from importlib.abc import Traversable

__all__ = ["DEMO_QUERIES", "KnowledgeAgentGroup", "cli", "main"]

DEMO_QUERIES = (
    "why did checkout requests time out during the outage",
    "how does retry_with_backoff compute the delay",
    "如何重置密码",
)
MCP_EXTRA_MESSAGE = missing_extra("the MCP server", "mcp")
SEARCH_MODES = ("hybrid", "keyword", "semantic", "dense")
DEFAULT_LIMIT = 10  # documents `search` shows without -n or a default_top_k setting
EXIT_INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for a Ctrl-C'd command
# Progress statuses of files whose change was committed to the database.
COMMITTED_STATUSES = frozenset({"processed", "removed"})

# --------------------------------------------------------------------------------------------
# the application object and the error mapping


def _say_status(message: str) -> None:
    """Long upkeep when a knowledge base opens (an index embedded again): stderr."""
    click.echo(message, err=True)


def _say_waiting(message: str) -> None:
    """Once per write that has to wait for another process's: stderr, never stdout."""
    click.echo(f"{message} …", err=True)


@dataclass
class App:
    """Per-invocation state: the global options, and the settings and core made from them."""

    data_dir: Path | None = None
    debug: bool = False
    cwd: Path = field(default_factory=Path.cwd)
    backend: str | None = None
    read_backend: str | None = None
    # For the Ctrl-C message of add, sync and watch: files committed by this invocation.
    collecting: bool = False
    committed: int = 0

    @cached_property
    def settings(self) -> Settings:
        """Resolved on first use, so ``--help`` never reads a project file.

        What an untrusted project file was refused is said once per command, on stderr
        (stdout is the protocol under ``serve``).
        """
        settings = resolve_settings(
            self.data_dir, backend=self.backend, read_backend=self.read_backend, cwd=self.cwd
        )
        if settings.warning:
            click.echo(f"warning: {settings.warning}", err=True)
        return settings

    def new_core(self, *, create: bool = True, rebuild: bool = True) -> KnowledgeAgentCore:
        """Open the knowledge base with the project settings; the caller closes it.

        Without ``create`` (commands that only read), a data folder holding no knowledge
        base is an error and nothing is created: a mistyped --data-dir must not become an
        empty knowledge base. Without ``rebuild``, an unreadable index is left as it is
        (``KnowledgeAgentCore(rebuild_unreadable=False)``).
        """
        # Imported here: the engines take most of a command's start-up, and --help,
        # --version and the commands that fail early never need them.
        from knowledge_agent.core.knowledge_agent_core import KnowledgeAgentCore

        settings = self.settings
        if settings.backend is None:
            if not create and not (settings.data_dir / DATABASE_FILE).exists():
                raise NotFoundError(
                    f"no knowledge base in {settings.data_dir} (from the {settings.origin}); "
                    "add something first: knowledge-agent add PATH"
                )
            settings.data_dir.mkdir(parents=True, exist_ok=True)
        return KnowledgeAgentCore(
            None if settings.backend else settings.data_dir,
            backend=settings.backend,
            read_backend=settings.read_backend,
            chunk_config=settings.config.chunk_config,
            search_config=settings.config.search_config,
            doc_type_rules=settings.config.doc_type_rules,
            on_lock_wait=_say_waiting,
            on_status=_say_status,
            reranker=settings.config.rerank,
            embedder=settings.config.embeddings,
            rebuild_unreadable=rebuild,
        )

    @contextmanager
    def open_core(
        self, *, create: bool = False, rebuild: bool = True
    ) -> Iterator[KnowledgeAgentCore]:
        """The knowledge base for one command, always closed; ``create`` for the commands
        that write, ``rebuild`` (see :meth:`new_core`)."""
        with self.new_core(create=create, rebuild=rebuild) as core:
            yield core

    def kb_or_default(self, kb: str | None) -> str:
        """``--kb`` if given, else the project file's ``default_kb`` (else "default")."""
        return kb if kb is not None else self.settings.config.default_kb

    @contextmanager
    def collecting_files(self) -> Iterator[None]:
        """The body of add, sync or watch: Ctrl-C reports the files committed so far.

        Under the collector's Ctrl-C handling a signal never falls between a file's
        commit and its count (only here: ``serve`` keeps asyncio's own handling).
        """
        from knowledge_agent.ingest.collector import graceful_interrupts

        self.collecting = True
        with graceful_interrupts():
            yield

    def counting(self, progress: ProgressCallback | None) -> ProgressCallback:
        """``progress`` (may be None) wrapped to count the files committed."""

        def update(event: CollectProgress) -> None:
            if event.status in COMMITTED_STATUSES:
                self.committed += 1
            if progress is not None:
                progress(event)

        return update

    def count_report(self, report: CollectReport) -> None:
        """Count the files a run committed that no progress event reported."""
        self.committed += report.processed + report.removed


def _fail(debug: bool, exc: BaseException, message: str) -> NoReturn:
    """``Error: message`` and exit code 1; with ``--debug`` the traceback first."""
    if debug:
        traceback.print_exception(type(exc), exc, exc.__traceback__, file=sys.stderr)
    if _disk_full(exc) and "disk full" not in message:
        message = f"disk full: {message}"
    raise click.ClickException(message) from exc


def _disk_full(exc: BaseException | None) -> bool:
    """Whether running out of space is what caused ``exc`` (anywhere in its chain)."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno in _NO_SPACE:
            return True
        if isinstance(exc, sqlite3.Error) and "disk is full" in str(exc):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


_NO_SPACE = {errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)}


def _interrupted(app: object, debug: bool, exc: KeyboardInterrupt) -> NoReturn:
    """Ctrl-C: one line (how many files were committed, when collecting), exit code 130."""
    if debug:
        traceback.print_exception(type(exc), exc, exc.__traceback__, file=sys.stderr)
    if isinstance(app, App) and app.collecting:
        files = "file" if app.committed == 1 else "files"
        message = (
            f"interrupted: {app.committed} {files} committed; run the same command again to finish"
        )
    else:
        message = "interrupted"
    click.echo(message, err=True)
    raise click.exceptions.Exit(EXIT_INTERRUPTED)


class _OneLineFormatter(logging.Formatter):
    """Log records without their traceback: without --debug an error stays one line."""

    def format(self, record: logging.LogRecord) -> str:
        if record.exc_info or record.exc_text or record.stack_info:
            record = logging.makeLogRecord(record.__dict__)
            record.exc_info = record.exc_text = record.stack_info = None
        return super().format(record)


@contextmanager
def _log_to_stderr(debug: bool) -> Iterator[None]:
    """Library log records on stderr for this invocation (never stdout: MCP stdio).

    Errors only by default, one line each: what a command did is in its own output
    (failed files are reported, not logged twice); --debug shows everything.
    """
    logger = logging.getLogger("knowledge_agent")
    handler = logging.StreamHandler(sys.stderr)
    formatter = logging.Formatter if debug else _OneLineFormatter
    handler.setFormatter(formatter("%(levelname)s %(name)s: %(message)s"))
    previous = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG if debug else logging.ERROR)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(previous)


class KnowledgeAgentGroup(click.Group):
    """The top-level group: maps every error raised by a command to one line and exit 1."""

    def invoke(self, ctx: click.Context) -> Any:
        debug = bool(ctx.params.get("debug"))
        with _log_to_stderr(debug):
            try:
                return super().invoke(ctx)
            except (click.ClickException, click.exceptions.Exit, click.Abort):
                raise
            except KeyboardInterrupt as exc:
                _interrupted(ctx.obj, debug, exc)
            except KnowledgeAgentError as exc:
                _fail(debug, exc, str(exc))
            except OSError as exc:  # a data folder that cannot be created, a full disk …
                where = f"{exc.filename}: " if exc.filename else ""
                _fail(debug, exc, f"{where}{exc.strerror or exc}")
            except Exception as exc:
                hint = "" if debug else " (run with --debug for the traceback)"
                _fail(debug, exc, f"unexpected {type(exc).__name__}: {exc}{hint}")


# --------------------------------------------------------------------------------------------
# shared options and helpers

pass_app = click.make_pass_decorator(App)


def json_option(func: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--json", "as_json", is_flag=True, help="Print JSON (shape in the epilog) instead."
    )(func)


def kb_option(help_text: str, *, multiple: bool = False) -> Callable[..., Any]:
    return click.option("--kb", multiple=multiple, metavar="NAME", help=help_text)


def verbose_option(func: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "-v",
        "--verbose",
        is_flag=True,
        help="List every skipped file with its reason, not only the counts by kind.",
    )(func)


def walk_options(func: Callable[..., Any]) -> Callable[..., Any]:
    func = click.option(
        "--follow-symlinks",
        is_flag=True,
        help="Also follow links to files and folders outside the folder collected (by "
        "default they are skipped and counted). Kept for `sync`.",
    )(func)
    func = click.option(
        "--exclude",
        multiple=True,
        metavar="GLOB",
        help="Skip files matching this gitignore-style glob (repeatable).",
    )(func)
    return click.option(
        "--include",
        multiple=True,
        metavar="GLOB",
        help="Only collect files matching this glob, e.g. '*.md' (repeatable).",
    )(func)


def _stderr_console_if_tty(as_json: bool) -> Console | None:
    """A stderr console for progress display, only when a person is watching."""
    if as_json or not sys.stderr.isatty():
        return None
    return render.make_console(stderr=True)


def _progress_console(as_json: bool) -> Console | None:
    """Where a collection's progress goes: stderr, a live bar on a terminal and sparse
    plain lines elsewhere (a log, CI); nowhere with --json, whose readers want data only."""
    return None if as_json else render.make_console(stderr=True)


def _check_kbs(core: KnowledgeAgentCore, names: Sequence[str] | str | None) -> None:
    """Exit 2 naming the valid knowledge bases for a name that does not exist."""
    check_values(
        "--kb", [names] if isinstance(names, str) else names or (), core.storage.sources.kb_names()
    )


def _missing_paths(paths: Sequence[str]) -> None:
    for path in paths:
        if path != "-" and not os.path.exists(os.path.expanduser(path)):
            raise IngestError(
                os.path.abspath(os.path.expanduser(path)), "no such file or directory"
            )


def _merged(reports: Sequence[CollectReport], kb: str) -> CollectReport:
    if len(reports) == 1:
        return reports[0]
    total = CollectReport(kb=kb)
    for report in reports:
        total.merge(report)
    return total


def _text_title(text: str) -> str:
    """A title for text from stdin: its first non-blank line, without Markdown #."""
    for line in text.splitlines():
        if line.strip():
            title = line.strip().lstrip("#").strip()
            return title if len(title) <= 80 else title[:79] + "…"
    return "stdin"


def _show_report(report: CollectReport, as_json: bool, verbose: bool) -> None:
    if as_json:
        render.print_json(report.to_dict())
    else:
        render.print_report(render.make_console(), report, verbose=verbose, base=os.getcwd())


def _parse_date(value: str | None, option: str, *, end_of_day: bool) -> datetime | None:
    """An ISO date or datetime, local time unless it has an offset.

    A date alone means the start of that day, or its end with ``end_of_day`` (--until).
    """
    if value is None:
        return None
    text = value.strip()
    if text.endswith(("Z", "z")):  # fromisoformat accepts "Z" only from Python 3.11
        text = text[:-1] + "+00:00"
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise QueryError(
            f"{option}: not a date: {value!r} (use YYYY-MM-DD or an ISO 8601 date and time)"
        ) from None
    if end_of_day and len(text) == 10:  # "2024-05-01": include the whole day
        parsed = datetime.combine(parsed.date(), day_time.max, parsed.tzinfo)
    # Without an offset, a date means the user's local time (astimezone assumes so).
    return parsed if parsed.tzinfo is not None else parsed.astimezone()


def _scope(value: str | None) -> str | None:
    """A path prefix: made absolute when it names an existing path (as source_uri is)."""
    if not value:
        return None
    path = os.path.expanduser(value)
    if not os.path.exists(path):
        return value
    full = os.path.abspath(path)
    return full.rstrip(os.sep) + os.sep if os.path.isdir(full) else full


# --------------------------------------------------------------------------------------------
# the group

EPILOG = """\b
Examples:
  knowledge-agent add docs/ notes.md --kb handbook
  knowledge-agent search "how do I roll back a release" --kb handbook
  knowledge-agent grep "max-age=" --kb handbook
  knowledge-agent demo

\b
The data folder is --data-dir, else $KNOWLEDGE_AGENT_HOME, else the nearest
.knowledge-agent.toml upward (see `knowledge-agent init`; what it names outside its
folder needs `knowledge-agent trust`), else the data_dir of config.toml in the user
config folder, else the user data folder. With --backend postgresql://… (or
$KNOWLEDGE_AGENT_BACKEND, or [backend] url) it lives in that database instead.
"""


@click.group(
    cls=KnowledgeAgentGroup,
    epilog=EPILOG,
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Folder holding the knowledge base (overrides $KNOWLEDGE_AGENT_HOME and project files).",
)
@click.option(
    "--backend",
    metavar="URL",
    help="Keep the knowledge base in this PostgreSQL database (postgresql://…) instead of "
    "the data folder (overrides $KNOWLEDGE_AGENT_BACKEND and [backend] url).",
)
@click.option(
    "--read-backend",
    metavar="URL",
    help="A hot standby of --backend that answers searches (overrides "
    "$KNOWLEDGE_AGENT_READ_BACKEND and [backend] read_url).",
)
@click.option("--debug", is_flag=True, help="Print tracebacks and debug logging on stderr.")
@click.version_option(package_name="knowledge-agent", prog_name="knowledge-agent")
@click.pass_context
def cli(
    ctx: click.Context,
    data_dir: Path | None,
    backend: str | None,
    read_backend: str | None,
    debug: bool,
) -> None:
    """An offline knowledge base: collect files, then search them by meaning and keywords."""
    ctx.obj = App(data_dir=data_dir, debug=debug, backend=backend, read_backend=read_backend)


def main(argv: Sequence[str] | None = None) -> None:
    """Console-script entry point."""
    for stream in (sys.stdout, sys.stderr):
        # A pipe on Windows may be cp1252: replace what it cannot encode (say Chinese
        # text) instead of failing halfway through the output.
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="replace")
    cli.main(args=list(argv) if argv is not None else None, prog_name="knowledge-agent")


# --------------------------------------------------------------------------------------------
# setting up


@cli.command(
    epilog="\b\nExample:\n  cd my-project && knowledge-agent init && knowledge-agent add docs/"
)
@click.option("--force", is_flag=True, help="Overwrite an existing .knowledge-agent.toml.")
@pass_app
def init(app: App, force: bool) -> None:
    """Write a commented .knowledge-agent.toml in the current folder, and trust it.

    The file lists every setting at its default. Commands run in this folder or below
    then keep their knowledge base in .knowledge-agent/ beside it.
    """
    path = write_default_config(app.cwd, force=force)
    trust_config_file(path, TrustStore(user_config_dir()))
    click.echo(f"Wrote {path}")
    click.echo(
        f"The knowledge base will live in {path.parent / LOCAL_DATA_DIR} "
        f"(add {LOCAL_DATA_DIR}/ to .gitignore)."
    )


@cli.command(
    epilog="""\b
Examples:
  knowledge-agent trust                       # the nearest .knowledge-agent.toml
  knowledge-agent trust ../other/.knowledge-agent.toml
  knowledge-agent trust --revoke

\b
A project file may come with a cloned repository. Until it is trusted, what it
names that reaches beyond its folder is ignored (with one warning): a network
provider under [embeddings] or [rerank] (base_url), an environment variable to
read (api_key_env), a data_dir, [[scan]] path or cache_dir outside its folder.
Trust is recorded in the user config folder ($KNOWLEDGE_AGENT_CONFIG_DIR
overrides it) with the file's real path and sha256: editing the file withdraws it."""
)
@click.argument("file", required=False, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--revoke", is_flag=True, help="Take the trust back: ignore those settings again.")
@pass_app
def trust(app: App, file: Path | None, revoke: bool) -> None:
    """Trust a project file: let its endpoints, secrets and outside paths apply.

    FILE defaults to the nearest project's settings: its .knowledge-agent.toml, else its
    .agentos/kb_config.json and 002 config.toml (both).
    """
    if file is None:
        files = find_project(app.cwd)
        if not files:
            raise ConfigError(
                f"no {CONFIG_FILE_NAME}, .agentos/kb_config.json or 002 config.toml in "
                f"{app.cwd} or a folder above it"
            )
    else:
        files = (app.cwd / file,)
    store = TrustStore(user_config_dir())
    for path in files:
        _trust_one(store, Path(os.path.realpath(path)), revoke)


def _trust_one(store: TrustStore, real: Path, revoke: bool) -> None:
    if revoke:
        if store.revoke(real):
            click.echo(f"No longer trusted: {real}")
        else:
            click.echo(f"{real} was not trusted.")
        return
    record, unlocked = trust_config_file(real, store)
    click.echo(f"Trusted {record.path} (sha256 {record.sha256[:12]}).")
    if unlocked:
        click.echo(f"It may now use: {', '.join(unlocked)}.")


@cli.command(
    "config",
    epilog="""\b
Examples:
  knowledge-agent config --show
  knowledge-agent config --show --json

\b
Settings come from the nearest project's .knowledge-agent.toml, else its
.agentos/kb_config.json (001) and 002 config.toml read together (kb_config.json
wins where both set one), else the user config file; --data-dir, --backend and
their environment variables win over every file, and a command's own options
(search -n, --kb, --rerank) over the settings.

\b
--json prints {"data_dir", "backend", "files": [{"path", "format", "trusted",
"ignored"}], "settings": [{"name", "value", "source": "file" | "project folder" | "option" |
"environment" | "default", "file", "key"}], "not_used": [{"file", "key", "reason"}],
"ignored", "warning"}. API keys show as ***.""",
)
@click.option("--show", is_flag=True, help="Print the settings in effect (the default).")
@json_option
@pass_app
def config_command(app: App, show: bool, as_json: bool) -> None:
    """Show the settings in effect and which file, option or default gave each."""
    from knowledge_agent.settings_view import settings_report, settings_text

    if as_json:
        render.print_json(settings_report(app.settings))
    else:
        click.echo("\n".join(settings_text(app.settings)))


# --------------------------------------------------------------------------------------------
# collecting


@cli.command(
    epilog="""\b
Examples:
  knowledge-agent add docs/ --kb handbook --exclude 'drafts/'
  knowledge-agent add src/ --include '*.py' --include '*.md'
  knowledge-agent add site/ --include '*.svg' --include '*.html'
  git log -1 --format=%B | knowledge-agent add - --title "Last commit"
  knowledge-agent add https://docs.python.org/3/library/json.html --depth 0
  knowledge-agent add https://fastapi.tiangolo.com/ --kb fastapi --exclude '*/de/*'

\b
A URL is a doc source: one page, a sitemap.xml, or a site crawled from that page
(same origin, depth 3, robots.txt respected; the URL options change that, and
--include/--exclude are URL globs for it). Adding it again re-crawls it at once;
`sync` re-crawls it when due. Unchanged pages cost one conditional request.

\b
Skipped files are counted by kind (images, fonts, binary, over the size limit …);
--verbose lists each. Images, fonts, media, archives, lock files, source maps and
minified bundles are left out as not text, and templates (*.j2, the HTML of
overrides/, templates/, _templates/) and site settings (CNAME, _redirects,
_headers) as not documents, unless an --include glob names them. Build output
(build/, dist/, _build/, _site/, a folder holding sitemap.xml.gz such as MkDocs'
site/), caches and virtualenvs are skipped; --exclude '!_build/' takes one back.
Links to files or folders outside the folder are not followed (counted as links
leaving the folder) unless --follow-symlinks is given.

\b
--json prints CollectReport.to_dict(): {"kb", "processed", "unchanged",
"skipped": [{"path", "reason"}], "skipped_summary": {"total", "groups": [{"kind",
"reason", "count", "extensions"}]}, "failed": [{"path", "reason"}], "removed",
"chunks_added", "chunks_removed", "bytes_processed", "duration_s", "item_ids",
"stopped_by", "notes"}."""
)
@click.argument("paths", nargs=-1, required=True, metavar="PATH|URL...")
@kb_option("Knowledge base to add to (default: the project's default_kb, else 'default').")
@walk_options
@click.option("--full", is_flag=True, help="Re-extract every file, not only changed ones.")
@click.option("--title", metavar="TEXT", help="Title of the text read from stdin (PATH '-').")
@crawl_options
@verbose_option
@json_option
@pass_app
def add(
    app: App,
    paths: tuple[str, ...],
    kb: str | None,
    include: tuple[str, ...],
    exclude: tuple[str, ...],
    follow_symlinks: bool,
    full: bool,
    title: str | None,
    verbose: bool,
    as_json: bool,
    **crawl: Any,
) -> None:
    """Collect files, folders, web pages or sites (or text from stdin: '-') into a
    knowledge base.

    Folders are walked honouring .gitignore; a re-run only extracts new and changed files
    and removes the items of deleted ones. Files and pages that fail are listed; the exit
    code is 0 unless a PATH does not exist.
    """
    urls = [path for path in paths if is_url(path)]
    if not urls and (flags := given(crawl)):
        raise click.UsageError(f"{', '.join(flags)} apply only to a URL")
    options, source = crawl_options_from(crawl) if urls else (None, {})
    walking = None
    if len(urls) < len(paths):  # include / exclude are URL globs for a URL
        walking = WalkOptions(
            include=include, exclude=exclude, follow_outside_links=follow_symlinks
        )
    elif follow_symlinks:
        raise click.UsageError("--follow-symlinks applies only to a folder")
    with app.collecting_files():
        _missing_paths([path for path in paths if not is_url(path)])
        if paths.count("-") > 1:
            raise click.UsageError("'-' (stdin) can be given only once")
        stdin_text = sys.stdin.read() if "-" in paths else None
        if stdin_text is not None and not stdin_text.strip():
            raise IngestError("-", "no text on standard input")
        name = app.kb_or_default(kb)
        reports: list[CollectReport] = []
        progress_console = _progress_console(as_json)
        with app.open_core(create=True) as core, render.collect_progress(progress_console) as bar:
            progress = app.counting(bar)
            for path in paths:
                if path == "-":
                    text = stdin_text or ""
                    reports.append(
                        core.collect_text(text, title=title or _text_title(text), kb=name)
                    )
                    app.count_report(reports[-1])
                    continue
                if is_url(path):
                    reports.append(
                        core.collect_knowledge(
                            path,
                            kb=name,
                            include=include,
                            exclude=exclude,
                            full=full,
                            progress=progress,
                            crawl=options,
                            **source,
                        )
                    )
                    continue
                target = Path(os.path.expanduser(path))
                reports.append(
                    core.collect_knowledge(
                        target, kb=name, walk_options=walking, full=full, progress=progress
                    )
                )
        _show_report(_merged(reports, name), as_json, verbose)


@cli.command(
    epilog="""\b
Example:
  knowledge-agent sync --kb handbook

\b
--json prints CollectReport.to_dict() (see `add --help`), summed over every path."""
)
@kb_option("Only re-scan the paths of this knowledge base.")
@click.option("--full", is_flag=True, help="Re-extract every file, not only changed ones.")
@verbose_option
@json_option
@pass_app
def sync(app: App, kb: str | None, full: bool, verbose: bool, as_json: bool) -> None:
    """Re-scan every collected folder and file: index changes, drop deleted files.

    In a folder of a git work tree, only the files git lists as changed since the last
    run are looked at (see `sources` for the commit and branch recorded).

    The project file's [[scan]] paths are collected too, the first time with their
    include/exclude globs.
    """
    with app.collecting_files():
        scans = [scan for scan in app.settings.config.scan if kb is None or scan.kb == kb]
        with app.open_core(create=True) as core:
            known = {info.name: info for info in core.list_kbs()}
            if kb is not None and kb not in known and not scans:
                core.get_kb(kb)  # raises "no knowledge base named …"
            tracked = {(info.name, root) for info in known.values() for root in info.roots}
            started = time.perf_counter()
            with render.collect_progress(_progress_console(as_json)) as bar:
                progress = app.counting(bar)
                if kb is None or kb in known:
                    report = core.sync(kb=kb, full=full, progress=progress)
                else:
                    report = CollectReport(kb=kb)
                for scan in scans:
                    if (scan.kb, str(scan.path)) in tracked:
                        continue  # re-scanned by core.sync above
                    _missing_paths([str(scan.path)])
                    report.merge(
                        core.collect_knowledge(
                            scan.path,
                            kb=scan.kb,
                            include=scan.include,
                            exclude=scan.exclude,
                            full=full,
                            progress=progress,
                        )
                    )
            report.duration_s = time.perf_counter() - started
        _show_report(report, as_json, verbose)


def _wait_for_interrupt() -> None:
    """Block until Ctrl-C (short sleeps: Windows delivers KeyboardInterrupt between them)."""
    while True:
        time.sleep(0.5)


def _watch_printer(as_json: bool) -> Callable[[CollectReport], None]:
    """What ``watch`` does with each update's report: a summary line, or a JSON line.

    Called from the command: ``--verbose`` is read from its click context.
    """
    verbose = bool(click.get_current_context().params.get("verbose"))
    console = render.make_console()
    lock = threading.Lock()  # updates arrive on the watcher's thread

    def show(report: CollectReport) -> None:
        with lock:
            if as_json:
                render.print_json_line(report.to_dict())
                return
            stamp = datetime.now().strftime("%H:%M:%S")
            console.print(f"{stamp}  {render.report_line(report)}")
            render.print_issues(console, "failed", report.failed, style="red")
            render.print_skipped(console, report, verbose=verbose, base=os.getcwd())

    return show


@cli.command(
    epilog="""\b
Example:
  knowledge-agent watch docs/ notes/ --kb handbook --debounce 2

\b
With --json each report is one line of JSON (CollectReport.to_dict(), see `add --help`)."""
)
@click.argument("paths", nargs=-1, required=True, metavar="PATH...")
@kb_option("Knowledge base to keep in sync (default: the project's default_kb).")
@walk_options
@click.option(
    "--debounce",
    type=click.FloatRange(min=0.01),
    default=1.0,
    show_default=True,
    metavar="SECONDS",
    help="Quiet time before a burst of changes is indexed.",
)
@verbose_option
@json_option
@pass_app
def watch(
    app: App,
    paths: tuple[str, ...],
    kb: str | None,
    include: tuple[str, ...],
    exclude: tuple[str, ...],
    follow_symlinks: bool,
    debounce: float,
    verbose: bool,
    as_json: bool,
) -> None:
    """Collect PATHs, then keep the knowledge base in sync with them until Ctrl-C.

    Prints a summary line per update. Uses watchdog when installed (the [watch] extra),
    else polls.
    """
    with app.collecting_files():
        _missing_paths(paths)
        name = app.kb_or_default(kb)
        show = _watch_printer(as_json)
        targets = [Path(os.path.expanduser(path)) for path in paths]
        walking = WalkOptions(
            include=include, exclude=exclude, follow_outside_links=follow_symlinks
        )
        with app.open_core(create=True) as core:
            with render.collect_progress(_progress_console(as_json)) as bar:
                progress = app.counting(bar)
                reports = [
                    core.collect_knowledge(target, kb=name, walk_options=walking, progress=progress)
                    for target in targets
                ]
            show(_merged(reports, name))

            def update(report: CollectReport) -> None:
                app.count_report(report)
                show(report)

            try:
                watcher = core.watch(
                    targets,
                    kb=name,
                    walk_options=walking,
                    debounce=debounce,
                    on_report=update,
                )
            except CollectInterrupted as exc:  # its own first pass reports no progress
                app.count_report(exc.report)
                raise
            if not as_json:
                click.echo(
                    f"Watching {len(targets)} path(s) into {name!r}; Ctrl-C to stop.", err=True
                )
            try:
                _wait_for_interrupt()
            except KeyboardInterrupt:
                pass
            finally:
                watcher.stop()
            # Ctrl-C while watching is the normal way to stop; one that cut an update short
            # (the collector stops at a file boundary) is reported like an interrupted add.
            cut = watcher.interrupted
            if isinstance(cut, CollectInterrupted):
                app.count_report(cut.report)
                raise cut
        if not as_json:
            click.echo("Stopped watching.", err=True)


@cli.command(
    epilog="""\b
Examples:
  knowledge-agent remove 4cc65d4d-6d8e-4b54-b7a1-714ea321e416
  knowledge-agent remove docs/old/ --kb handbook
  knowledge-agent remove https://fastapi.tiangolo.com/

\b
--json prints {"target", "kind": "item" | "path", "removed"}."""
)
@click.argument("target", metavar="ITEM_ID|PATH|URL")
@kb_option("Only remove from this knowledge base.")
@json_option
@pass_app
def remove(app: App, target: str, kb: str | None, as_json: bool) -> None:
    """Delete an item by id, or forget a collected file, folder or doc source (its start
    URL) and its items."""
    with app.open_core() as core:
        item_id = core.resolve_id(target)
        item = core.get_item(item_id) if item_id else None
        if item is not None and (kb is None or item.kb == kb):
            core.delete_knowledge_item(item.id)
            kind, removed = "item", 1
        else:
            try:
                removed = core.remove_source(os.path.expanduser(target), kb=kb)
            except NotFoundError:
                where = f" in {kb!r}" if kb else ""
                raise NotFoundError(f"no item or collected path {target!r}{where}") from None
            kind = "url" if is_url(target) else "path"
    if as_json:
        render.print_json({"target": target, "kind": kind, "removed": removed})
    else:
        noun = "item" if removed == 1 else "items"
        click.echo(f"Removed {removed} {noun} ({'item id' if kind == 'item' else 'path'}).")


def _folder_json(root: SourceRoot) -> dict[str, Any]:
    """A collected folder or file for ``sources --json``; ``git`` for one in a work tree."""
    entry: dict[str, Any] = {
        "kb": root.kb,
        "root": path_to_db(root.root),
        "added_at": root.added_at.isoformat(),
        "synced_at": root.synced_at.isoformat() if root.synced_at else None,
    }
    state = git_state_of(root.options)
    if state is not None:
        entry["git"] = {"branch": state.branch, "commit": state.commit}
    return entry


@cli.command(
    epilog="""\b
--json prints {"folders": [{"kb", "root", "added_at", "synced_at", "git": {"branch",
"commit"} (a folder in a git work tree)}], "doc_sources":
[{"kb", "url", "name", "options", "tags", "enabled", "refresh_interval", "added_at",
"crawled_at", "last_error", "pages", "due"}]}."""
)
@kb_option("Only the sources of this knowledge base.")
@json_option
@pass_app
def sources(app: App, kb: str | None, as_json: bool) -> None:
    """List what was collected: folders and files, and doc sources crawled from the web."""
    with app.open_core() as core:
        _check_kbs(core, kb)
        roots = core.storage.sources.get_roots(kb)
        docs = core.doc_sources(kb=kb)
    if as_json:
        render.print_json(
            {
                "folders": [_folder_json(root) for root in roots],
                "doc_sources": [{**doc.to_dict(), "due": doc.due()} for doc in docs],
            }
        )
        return
    render.print_sources(render.make_console(), roots, docs)


@cli.command(
    epilog="""\b
Examples:
  knowledge-agent explain 9b1f0c2e-… --query "rotate signing keys"
  knowledge-agent explain 9b1f0c2e-… --json

\b
--json prints ScoreExplanation.to_dict(): {"matched_terms", "term_frequencies",
"keyword_score", "semantic_score", "dense_score", "fused_score", "document_boost",
"recency_boost", "rerank_delta", "keyword_rank", "semantic_rank", "dense_rank",
"rank_before_rerank", "rank_after_rerank", "path", "lines", "page", "details",
"final_score"}."""
)
@click.argument("chunk_id", metavar="CHUNK_ID")
@click.option("--query", "-q", metavar="TEXT", help="Explain the chunk's score for this query.")
@json_option
@pass_app
def explain(app: App, chunk_id: str, query: str | None, as_json: bool) -> None:
    """Why a chunk ranks as it does for a query: each engine's score and rank, the fusion,
    the passage and document evidence, the boosts and the matched terms; without --query,
    where the chunk is and its document's boosts. The final score is
    fused × document boost × recency boost + rerank delta."""
    with app.open_core() as core:
        explained = core.explain(core.resolve_id(chunk_id, "chunk") or chunk_id, query)
    if as_json:
        render.print_json(explained.to_dict())
        return
    console = render.make_console()
    console.print(render.explanation_text(explained))


@cli.command(epilog='--json prints {"chunks_indexed": N}.')
@json_option
@pass_app
def rebuild(app: App, as_json: bool) -> None:
    """Rebuild both search indexes from the database (SQLite is the source of truth)."""
    spinning = render.spinner(_stderr_console_if_tty(as_json), "Rebuilding the search indexes…")
    with app.open_core() as core, spinning:
        count = core.rebuild_index()
    if as_json:
        render.print_json({"chunks_indexed": count})
    else:
        click.echo(f"Indexed {count} chunks.")


@cli.command(
    epilog="""\b
Everything goes across: knowledge bases, items and chunks, collected roots and
tracked files, doc sources and pages; the server indexes each write as it comes.
An item already on the server is replaced, so a migration that stopped half-way
is finished by running it again. The data folder is left as it is.

\b
Example:
  knowledge-agent migrate --to postgresql://agent@db.example.com/knowledge
  knowledge-agent --backend postgresql://agent@db.example.com/knowledge search "…"

\b
--json prints {"to", "knowledge_bases", "items", "chunks", "roots", "sources",
"doc_sources", "doc_pages"}."""
)
@click.option(
    "--to",
    "to_url",
    required=True,
    metavar="URL",
    help="The PostgreSQL database to copy into (postgresql://…).",
)
@json_option
@pass_app
def migrate(app: App, to_url: str, as_json: bool) -> None:
    """Copy the data folder's knowledge base to a PostgreSQL server."""
    from knowledge_agent.backends import backend_label
    from knowledge_agent.backends.migrate import copy_storage
    from knowledge_agent.core.knowledge_agent_core import KnowledgeAgentCore

    try:
        target_label = backend_label(to_url)
    except ConfigError as exc:
        raise ConfigError(f"--to: {exc}") from None
    if target_label == "local":
        raise ConfigError("--to must be a postgresql:// URL: the data folder is the source")
    if app.settings.backend is not None:
        raise ConfigError("migrate copies a data folder: leave out --backend (and its setting)")
    console = _progress_console(as_json)
    with (
        app.open_core() as source,
        KnowledgeAgentCore(
            backend=to_url,
            chunk_config=app.settings.config.chunk_config,
            search_config=app.settings.config.search_config,
            embedder=app.settings.config.embeddings,
        ) as target,
        render.progress_bar(console, "Copying items") as advance,
    ):
        report = copy_storage(source.storage, target.storage, progress=advance)
    if as_json:
        render.print_json({"to": target_label, **report.to_dict()})
    else:
        click.echo(
            f"Copied {report.items} items ({report.chunks} chunks) in "
            f"{report.knowledge_bases} knowledge bases to {target_label}."
        )


@cli.command(
    epilog="""\b
Every index file is verified against the size and checksum recorded when it was
written; a damaged index is named with its file. Exit code 1 when an index is
damaged or disagrees with the database (and was not repaired).

\b
--json prints IndexStatus.to_dict(): {"data_dir", "backend", "knowledge_bases", "items",
"chunks", "sources", "roots", "keyword_index": {"items", "chunks"}, "semantic_index": {...},
"pending_changes", "last_indexed_at", "sizes", "consistent", "problems",
"damaged": [{"index", "file", "problem"}], "repaired"}."""
)
@click.option(
    "--repair", is_flag=True, help="Rebuild a damaged or inconsistent index from the database."
)
@json_option
@pass_app
def check(app: App, repair: bool, as_json: bool) -> None:
    """Verify the search indexes' files and that they agree with the database;
    --repair rebuilds what is wrong."""
    # Opened without rebuilding an unreadable index: check reports it, --repair fixes it.
    with app.open_core(rebuild=False) as core:
        status = core.check(repair=repair)
    if as_json:
        render.print_json(status.to_dict())
    else:
        render.print_status(render.make_console(), status, origin=app.settings.origin)
    if not status.consistent:
        raise click.exceptions.Exit(1)


# --------------------------------------------------------------------------------------------
# searching


@cli.command(
    epilog="""\b
Examples:
  knowledge-agent search "how do I roll back a failed deploy"
  knowledge-agent search retry_with_backoff --type code -n 3
  knowledge-agent search 如何重置密码 --kb faq --explain
  knowledge-agent search "pool timeout" --scope docs/ --since 2024-05-01 --json
  knowledge-agent search "rotate the signing keys" --budget 2000 --facets

\b
Dates are ISO 8601, local time unless they carry an offset (Z for UTC); a date
alone in --until
includes that whole day.

\b
--json prints {"query", "mode", "results": [...]}; a result is its document's
"item_id", "title", "path", "kb", "source_type", "doc_type", "language",
"content_chars", then "score", "confidence", "search_mode", "matched_fields",
"matched_chunks" (best first) and "context_chunks". A chunk has "chunk_id",
"location" (path:12-30, path p.3, or a web page's link: url#section, the bare url before
its first section), "heading", "heading_path", "link" (web pages), "start_line",
"end_line", "page" for PDFs, "content"; a matched one its "evidence_ref", "score" and
"passage" (the part that answers: "text", positions, lines or page, "heading_path",
"link", "evidence_ref"; the location fields then describe it), and its "explanation"
with --explain. An evidence ref's #L12-L30 is a line range of the stored text; the link
is what a browser opens. The document's whole text ("content") only with --full.

\b
--facets adds "facets": {"total", "kb", "doc_type", "source_type"}, each a count of
matching documents by value (every match, not only the results shown). --budget N prints
the packed passages instead: as text, each under a "[n] location · heading" line; with
--json {"query", "budget", "tokens", "left_out", "passages": [{"item_id", "path",
"title", "kb", "location", "heading", "text", "start_position", "end_position",
"start_line", "end_line", "chunk_ids", "matched_chunk_ids", "score", "tokens",
"truncated"}]}."""
)
@click.argument("query")
@kb_option("Search only this knowledge base (repeatable; default: all).", multiple=True)
@click.option("--scope", metavar="PATH_PREFIX", help="Only files under this path or URL prefix.")
@click.option(
    "--type",
    "source_types",
    multiple=True,
    metavar="SOURCE_TYPE",
    help="Only this source type: markdown, pdf, code, html … (repeatable).",
)
@click.option(
    "--doc-type",
    "doc_types",
    multiple=True,
    metavar="TYPE",
    help="Only this doc type: adr, runbook, spec, guide … (repeatable).",
)
@click.option(
    "--lang",
    "languages",
    multiple=True,
    metavar="LANG",
    help="Only this language code, e.g. en or zh (repeatable).",
)
@click.option("--since", metavar="DATE", help="Only items updated on or after DATE.")
@click.option("--until", metavar="DATE", help="Only items updated on or before DATE.")
@click.option(
    "-n",
    "--limit",
    type=click.IntRange(min=1),
    default=None,
    help="Number of documents to show [default: the settings' default_top_k, else 10].",
)
@click.option(
    "--context",
    type=click.IntRange(min=0),
    default=None,
    metavar="N",
    help="Neighbouring chunks shown on each side of a match [default: 1; 0 with --json and "
    "the other data formats, which give the matched passages, unless --budget packs them].",
)
@click.option(
    "--min-score",
    type=click.FloatRange(0, 1),
    metavar="F",
    help="Drop results whose confidence (0-1, the same scale for any query) is below F.",
)
@click.option(
    "--mode",
    type=click.Choice(SEARCH_MODES),
    default="hybrid",
    show_default=True,
    help="Rank with every engine, keywords (BM25F) only, TF-IDF only, or dense vectors only "
    "(with [embeddings] in the project file).",
)
@click.option(
    "--explain",
    is_flag=True,
    help="Show the score breakdown and matched terms (with --json: each matched chunk's "
    "explanation).",
)
@click.option(
    "--full",
    is_flag=True,
    help="With --json: each result's whole document text too; as text: passages uncut.",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(FORMATS),
    default="text",
    show_default=True,
    help="text for people; json, ndjson (a result a line), csv, md, or files (paths only).",
)
@click.option(
    "--files", "files_only", is_flag=True, help="Only the paths, best first (--format files)."
)
@click.option(
    "--symbol",
    "symbols",
    multiple=True,
    metavar="NAME",
    help="Only code chunks defining this function or class (Parser.parse_args or parse_args).",
)
@click.option(
    "--references",
    "references",
    multiple=True,
    metavar="NAME",
    help="Only code chunks using or importing this name: who uses it (repeatable).",
)
@click.option("--all", "every", is_flag=True, help="Every result above --min-score, not only -n.")
@click.option(
    "--rerank",
    is_flag=True,
    help="Re-score the best results with the project file's [rerank] service.",
)
@click.option(
    "--facets",
    "show_facets",
    is_flag=True,
    help="Also count every matching document (not only those shown) per knowledge base, "
    "doc type and source type.",
)
@click.option(
    "--budget",
    type=click.IntRange(min=1),
    metavar="TOKENS",
    help="Print the best passages packed into this many tokens (about 4 characters, or 1 "
    "CJK character, each): neighbouring chunks of a document merged into one passage, a "
    "context to give a model.",
)
@json_option
@pass_app
def search(
    app: App,
    query: str,
    kb: tuple[str, ...],
    scope: str | None,
    source_types: tuple[str, ...],
    doc_types: tuple[str, ...],
    languages: tuple[str, ...],
    since: str | None,
    until: str | None,
    limit: int | None,
    context: int | None,
    min_score: float | None,
    mode: str,
    explain: bool,
    full: bool,
    fmt: str,
    files_only: bool,
    symbols: tuple[str, ...],
    references: tuple[str, ...],
    every: bool,
    rerank: bool,
    show_facets: bool,
    budget: int | None,
    as_json: bool,
) -> None:
    """Find the passages that answer QUERY: best documents first, each with its best chunk.

    Shows the document, where its best passage is (line range, PDF page or page link) and
    the section it sits in, the passage's lines with the matched terms marked (a matching
    code block whole, up to 30 lines), the other matched passages a line each, and the
    neighbouring chunks as context.
    """
    updated_after = _parse_date(since, "--since", end_of_day=False)
    updated_before = _parse_date(until, "--until", end_of_day=True)
    fmt = "json" if as_json else "files" if files_only else fmt
    _check_search_extras(fmt, show_facets, budget)
    if context is None:  # neighbours help a reader; a program asks for them (size stays small)
        context = 1 if fmt == "text" or budget is not None else 0
    if limit is None:
        limit = app.settings.config.search_config.default_top_k or DEFAULT_LIMIT
    with app.open_core() as core:
        check_filters(
            core,
            kb=kb,
            source_types=source_types,
            doc_types=doc_types,
            languages=languages,
            doc_type_rules=app.settings.config.doc_type_rules.values(),
        )
        filters: dict[str, Any] = {
            "kb": kb or None,
            "source_type": source_types or None,
            "doc_type": doc_types or None,
            "language": languages or None,
            "path_prefix": _scope(scope),
            "updated_after": updated_after,
            "updated_before": updated_before,
            "symbol": symbols or None,
            "references": references or None,
        }
        search = functools.partial(
            core.search,
            query,
            context_window=context,
            min_confidence=min_score,
            mode=mode,
            rerank=rerank,
            **filters,
        )
        if every:
            results = search(limit=_ALL_RESULTS)
        elif fmt == "files":
            results = distinct_paths(lambda asked: search(limit=asked), limit)
        else:
            results = search(limit=limit)
        facets = core.facets(query, **filters) if show_facets else None
        if budget is not None:  # packed while the documents can still be read
            _write_packed(fmt, query, core.pack(results, budget=budget), facets)
            return
        texts = _texts(core, results) if full and fmt != "text" else None
    if fmt != "text":
        write_results(fmt, query, mode, results, texts=texts, explain=explain, facets=facets)
    else:
        if facets is not None:
            render.print_facets(render.make_console(), facets)
        render.print_results(
            render.make_console(),
            results,
            explain=explain,
            base=os.getcwd(),
            query=query,
            analyzer=core.analyzer,
            full=full,
        )


def _check_search_extras(fmt: str, show_facets: bool, budget: int | None) -> None:
    """--facets and --budget print in the text and JSON formats only."""
    for flag, asked in (("--facets", show_facets), ("--budget", budget is not None)):
        if asked and fmt not in ("text", "json"):
            raise click.UsageError(f"{flag} works with the text and --json formats, not {fmt}")


def _write_packed(fmt: str, query: str, packed: PackedContext, facets: SearchFacets | None) -> None:
    """A packed context: its text (the summary line on stderr), or with --json
    {"query", "budget", "tokens", "left_out", "passages", "facets"?}."""
    if fmt == "json":
        payload = {"query": query, **packed.to_dict()}
        if facets is not None:
            payload["facets"] = facets.to_dict()
        render.print_json(payload)
        return
    if facets is not None:
        render.print_facets(render.make_console(stderr=True), facets)
    if packed.passages:
        click.echo(packed.text())
    click.echo(
        f"{len(packed.passages)} passages, {packed.tokens:,} of {packed.budget:,} tokens"
        + (f"; {packed.left_out} more did not fit" if packed.left_out else ""),
        err=True,
    )


def _texts(core: KnowledgeAgentCore, results: list[SearchResult]) -> dict[str, str]:
    """The whole text of each result's document, by item id (what ``--full`` adds)."""
    items = (core.get_item(result.item.id) for result in results)
    return {item.id: item.content for item in items if item is not None}


@cli.command(
    epilog="""\b
Examples:
  knowledge-agent grep "max-age="
  knowledge-agent grep "def \\w+_backoff" --regex --source retry

\b
A line of a crawled web page is shown at its link (the page with the anchor of
the section it is in), not at a line number of the page's stored text.

\b
--json prints {"pattern", "regex", "case_sensitive", "matches": [{"item_id", "kb",
"title", "source_uri", "line_number", "line", "link"}]}; "link" is "" for files."""
)
@click.argument("pattern")
@click.option("--regex", is_flag=True, help="PATTERN is a Python regular expression.")
@click.option("--case-sensitive", is_flag=True, help="Match case exactly.")
@kb_option("Only this knowledge base (repeatable; default: all).", multiple=True)
@click.option("--source", metavar="KEYWORD", help="Only items whose path or title contains it.")
@click.option(
    "-n",
    "--max",
    "max_matches",
    type=click.IntRange(min=1),
    default=50,
    show_default=True,
    help="Stop after this many matching lines.",
)
@json_option
@pass_app
def grep(
    app: App,
    pattern: str,
    regex: bool,
    case_sensitive: bool,
    kb: tuple[str, ...],
    source: str | None,
    max_matches: int,
    as_json: bool,
) -> None:
    """Print every stored line containing PATTERN, as path:line: text (exact, unlike search);
    a web page's line as link: text."""
    expression = compile_pattern(pattern, regex=regex, case_sensitive=case_sensitive)
    with app.open_core() as core:
        _check_kbs(core, kb)
        matches = core.text_search(
            pattern,
            kb=kb or None,
            regex=regex,
            case_sensitive=case_sensitive,
            source_keyword=source,
            max_matches=max_matches,
        )
        matches = linked(matches, core.storage.get_chunks_for_item)
    if as_json:
        render.print_json(
            {
                "pattern": pattern,
                "regex": regex,
                "case_sensitive": case_sensitive,
                "matches": [match.to_dict() for match in matches],
            }
        )
    elif matches:
        render.print_matches(render.make_console(), matches, expression, base=os.getcwd())
    else:
        click.echo("No matches.", err=True)


# --------------------------------------------------------------------------------------------
# reading


@cli.command(
    epilog="""\b
Examples:
  knowledge-agent get 4cc65d4d-6d8e-4b54-b7a1-714ea321e416
  knowledge-agent get docs/deploy-guide.md --json
  knowledge-agent get docs/deploy-guide.md:12-30
  knowledge-agent get --chunk 9b1f0c2e-… --neighbors 2
  knowledge-agent get 'kb:9b1f0c2e-…:docs/deploy-guide.md#L12-L30@3f2a9c0b1d4e'

\b
--json prints {"items": [KnowledgeItem.to_dict()]}; with --chunk,
{"chunk", "item" (without content), "before": [chunks], "after": [chunks]}; for an
evidence reference, {"ref", "status", "current_ref", "item_id", "title", "chunk"}; for
PATH:START-END, {"item_id", "path", "start", "lines"}."""
)
@click.argument("target", required=False, metavar="[ITEM_ID|PATH|PATH:START-END|REF]")
@click.option("--chunk", "chunk_id", metavar="CHUNK_ID", help="Show this chunk in context.")
@click.option(
    "--neighbors",
    type=click.IntRange(min=0),
    default=1,
    show_default=True,
    metavar="N",
    help="With --chunk: chunks shown on each side.",
)
@kb_option("With a PATH collected into several knowledge bases: only this one.")
@json_option
@pass_app
def get(
    app: App,
    target: str | None,
    chunk_id: str | None,
    neighbors: int,
    kb: str | None,
    as_json: bool,
) -> None:
    """Show an item (by id or collected file path) with its metadata and content.

    With --chunk, show that chunk and its neighbours instead (chunk ids are in the
    search --json output and in search --explain). Given an evidence reference (kb:…@hash,
    from search --json or the MCP tools), show the cited text now and whether it is
    unchanged, moved, changed or gone since it was cited (exit code 1 when gone).
    """
    if target is not None and target.startswith("kb:") and chunk_id is None:
        with app.open_core() as core:
            check = core.check_citation(target)
        if as_json:
            render.print_json(check.to_dict())
        else:
            render.print_citation(render.make_console(), check)
        if check.status == "gone":
            raise SystemExit(1)
        return
    if chunk_id is not None:
        with app.open_core() as core:
            context = _chunk_of(core, chunk_id, neighbors, target)
        if as_json:
            render.print_json(context.to_dict())
        else:
            render.print_chunk_context(render.make_console(), context, base=os.getcwd())
        return
    if target is None:
        raise click.UsageError("give an ITEM_ID or PATH, or --chunk CHUNK_ID")
    span = _LINE_SPAN.fullmatch(target)
    with app.open_core() as core:
        item_id = core.resolve_id(target)
        item = core.get_item(item_id) if item_id else None
        items = [item] if item is not None else core.items_at(os.path.expanduser(target), kb=kb)
        if not items and span is not None:
            items = core.items_at(os.path.expanduser(span.group(1)), kb=kb)
            if items:
                _print_lines(items[0], int(span.group(2)), int(span.group(3)), as_json)
                return
    if not items:
        raise NotFoundError(f"no item or collected file {target!r}")
    if as_json:
        render.print_json({"items": [entry.to_dict() for entry in items]})
        return
    console = render.make_console()
    for number, entry in enumerate(items):
        if number:
            console.print()
        render.print_item(console, entry, base=os.getcwd())


# search --all: every result above the threshold (the search itself caps what it ranks).
_ALL_RESULTS = 10_000

# get PATH:START-END — a line range of a collected file (qmd's form).
_LINE_SPAN = re.compile(r"(.+):(\d+)-(\d+)")


def _print_lines(item: KnowledgeItem, start: int, end: int, as_json: bool) -> None:
    """Lines ``start``..``end`` (1-based, inclusive) of an item's text, numbered."""
    if not 1 <= start <= end:
        raise click.BadParameter(f"{start}-{end} is not a line range", param_hint="PATH:START-END")
    lines = item.content.split("\n")[start - 1 : end]
    if as_json:
        render.print_json(
            {"item_id": item.id, "path": item.source_uri, "start": start, "lines": lines}
        )
        return
    width = len(str(start + len(lines) - 1))
    for number, line in enumerate(lines, start=start):
        click.echo(f"{number:>{width}}  {line}")


def _chunk_of(
    core: KnowledgeAgentCore, chunk_id: str, neighbors: int, target: str | None
) -> ChunkContext:
    """The chunk in context; with a target, it must belong to that item or file."""
    context = core.read_chunk(core.resolve_id(chunk_id, "chunk") or chunk_id, neighbors=neighbors)
    item = context.item
    if target is not None and target != item.id and not _same_path(target, item.source_uri):
        raise NotFoundError(f"chunk {chunk_id!r} is not part of {target!r}")
    return context


def _same_path(target: str, uri: str | None) -> bool:
    if not uri:
        return False
    return target == uri or os.path.abspath(os.path.expanduser(target)) == uri


@cli.command(
    "multi-get",
    epilog="""\b
Examples:
  knowledge-agent multi-get 'docs/*.md'
  knowledge-agent multi-get '*/runbooks/*' --files

\b
A relative pattern matches at any depth ('docs/*.md' finds /home/me/docs/a.md); '*'
crosses '/'. --json prints {"count", "items": [KnowledgeItem.to_dict()]}.""",
)
@click.argument("pattern", metavar="GLOB")
@kb_option("Only items of this knowledge base.")
@click.option("--files", "files_only", is_flag=True, help="Only the matching paths.")
@click.option(
    "-n",
    "--limit",
    type=click.IntRange(min=1),
    default=50,
    show_default=True,
    help="Items at most.",
)
@json_option
@pass_app
def multi_get(
    app: App, pattern: str, kb: str | None, files_only: bool, limit: int, as_json: bool
) -> None:
    """Show every collected item whose path or URL matches GLOB (several `get`s at once)."""
    check_glob(pattern, "GLOB")
    glob = pattern if pattern.startswith(("/", "*")) or "://" in pattern else "*/" + pattern
    matcher = glob_regex([glob], "GLOB")
    with app.open_core() as core:
        check_filters(core, kb=[kb] if kb else ())
        found = [
            facts.id
            for facts in sorted(
                core.storage.iter_item_facts(kb=kb), key=lambda f: f.source_uri or ""
            )
            if facts.source_uri and matcher.match(facts.source_uri)
        ]
        items = core.storage.get_items(found[:limit])
    ordered = [items[item_id] for item_id in found[:limit] if item_id in items]
    if not ordered:
        raise NotFoundError(f"no collected file or page matches {pattern!r}")
    if files_only:
        for item in ordered:
            click.echo(item.source_uri)
    elif as_json:
        render.print_json({"count": len(ordered), "items": [item.to_dict() for item in ordered]})
    else:
        console = render.make_console()
        for number, item in enumerate(ordered):
            if number:
                console.print()
            render.print_item(console, item, base=os.getcwd())
    if len(found) > limit:
        click.echo(f"{len(found) - limit} more match; raise -n to see them", err=True)


@cli.command(
    "list",
    epilog="""\b
Example:
  knowledge-agent list --kb handbook --type pdf

\b
--json prints {"count", "items": [KnowledgeItem.to_dict() without "content"]}.""",
)
@kb_option("Only items of this knowledge base.")
@click.option("--type", "source_type", metavar="SOURCE_TYPE", help="Only this source type.")
@click.option(
    "-n",
    "--limit",
    type=click.IntRange(min=1),
    default=100,
    show_default=True,
    help="Items to show.",
)
@click.option("--offset", type=click.IntRange(min=0), default=0, help="Items to skip first.")
@json_option
@pass_app
def list_command(
    app: App, kb: str | None, source_type: str | None, limit: int, offset: int, as_json: bool
) -> None:
    """List stored items, oldest first: id, knowledge base, type, title and source."""
    with app.open_core() as core:
        check_filters(
            core, kb=[kb] if kb else (), source_types=[source_type] if source_type else ()
        )
        items = core.list_items(kb=kb, source_type=source_type, limit=limit, offset=offset)
        short = {item.id: core.short_id(item.id) for item in items} if not as_json else {}
    if as_json:
        rows = [{k: v for k, v in item.to_dict().items() if k != "content"} for item in items]
        render.print_json({"count": len(rows), "items": rows})
    else:
        render.print_items(render.make_console(), items, base=os.getcwd(), short_ids=short)


@cli.command(
    epilog="""\b
--json prints {"status": IndexStatus.to_dict() (see `check --help`),
"knowledge_bases": [KnowledgeBaseInfo.to_dict()] (see `kb list --help`),
"config_file": path or null, "usage": {"embedding", "rerank": {"name", "requests",
"failed", "texts", "tokens", "estimated_tokens"}}}. Usage is this process's (the
providers count from when the knowledge base is opened; nothing is stored): the MCP
server's index_status reports a long-running server's."""
)
@json_option
@pass_app
def stats(app: App, as_json: bool) -> None:
    """Show what the knowledge base holds: counts, last indexing, sizes on disk, and what
    the embedding and rerank services were asked for in this process."""
    with app.open_core() as core:
        status = core.status()
        kbs = core.list_kbs()
        usage = core.usage()
    config_file = str(app.settings.config_file) if app.settings.config_file else None
    if as_json:
        render.print_json(
            {
                "status": status.to_dict(),
                "knowledge_bases": [info.to_dict() for info in kbs],
                "config_file": config_file,
                "usage": {kind: used.to_dict() for kind, used in usage.items()},
            }
        )
        return
    console = render.make_console()
    render.print_status(console, status, origin=app.settings.origin, config_file=config_file)
    render.print_usage(console, usage)
    console.print()
    render.print_kbs(console, kbs)


# --------------------------------------------------------------------------------------------
# knowledge bases

KB_SHAPE = """\b
--json prints {"knowledge_base": {"name", "description", "created_at", "items",
"chunks", "sources", "roots", "last_indexed_at"}}."""


@cli.group()
def kb() -> None:
    """Create, list, describe and remove named knowledge bases."""


@kb.command(
    "create",
    epilog="\b\nExample:\n  knowledge-agent kb create handbook "
    "--description 'Team runbooks and ADRs'\n\n" + KB_SHAPE,
)
@click.argument("name")
@click.option("--description", default="", help="What the knowledge base holds (shown to agents).")
@json_option
@pass_app
def kb_create(app: App, name: str, description: str, as_json: bool) -> None:
    """Create an empty knowledge base NAME."""
    with app.open_core(create=True) as core:
        info = core.create_kb(name, description)
    _show_kb(info, as_json, f"Created knowledge base {name!r}.")


@kb.command(
    "list",
    epilog="""\b
--json prints {"knowledge_bases": [{"name", "description", "created_at", "items",
"chunks", "sources", "roots", "last_indexed_at"}]}.""",
)
@json_option
@pass_app
def kb_list(app: App, as_json: bool) -> None:
    """List knowledge bases with their counts and descriptions."""
    with app.open_core() as core:
        kbs = core.list_kbs()
    if as_json:
        render.print_json({"knowledge_bases": [info.to_dict() for info in kbs]})
    else:
        render.print_kbs(render.make_console(), kbs)


@kb.command(
    "describe",
    epilog="\b\nExample:\n  knowledge-agent kb describe handbook "
    "'Runbooks, ADRs and the on-call guide'\n\n" + KB_SHAPE,
)
@click.argument("name")
@click.argument("text", required=False)
@json_option
@pass_app
def kb_describe(app: App, name: str, text: str | None, as_json: bool) -> None:
    """Show knowledge base NAME, or set its description to TEXT."""
    with app.open_core() as core:
        info = core.get_kb(name) if text is None else core.describe_kb(name, text)
    _show_kb(info, as_json, None if text is None else f"Described knowledge base {name!r}.")


@kb.command("remove", epilog='--json prints {"name", "items_removed"}.')
@click.argument("name")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@json_option
@pass_app
def kb_remove(app: App, name: str, yes: bool, as_json: bool) -> None:
    """Delete knowledge base NAME with all its items and collected paths."""
    with app.open_core() as core:
        info = core.get_kb(name)
        if not yes:
            click.confirm(
                f"Delete knowledge base {name!r} and its {info.items} items?",
                abort=True,
                err=True,
            )
        removed = core.remove_kb(name)
    if as_json:
        render.print_json({"name": name, "items_removed": removed})
    else:
        click.echo(f"Removed knowledge base {name!r} ({removed} items).")


def _show_kb(info: KnowledgeBaseInfo, as_json: bool, message: str | None) -> None:
    if as_json:
        render.print_json({"knowledge_base": info.to_dict()})
        return
    if message:
        click.echo(message)
    render.print_kb(render.make_console(), info)


# --------------------------------------------------------------------------------------------
# serving and the demo


@cli.command(
    epilog="""\b
Example (an MCP client configuration):
  {"command": "knowledge-agent", "args": ["--data-dir", "/path/kb", "serve"]}
Over HTTP: knowledge-agent serve --http 8765, then connect to http://127.0.0.1:8765/mcp
From other machines: KA_TOKEN=… knowledge-agent serve --http 0.0.0.0:8765 --allow-remote
--token-env KA_TOKEN; clients send Authorization: Bearer <the token>"""
)
@click.option(
    "--root",
    "roots",
    multiple=True,
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    metavar="DIR",
    help="A folder the server's tools may collect from (repeatable).",
)
@click.option(
    "--allow-url",
    "allow_urls",
    multiple=True,
    metavar="PREFIX",
    help="A URL prefix the server's tools may crawl, e.g. https://docs.python.org/3/ "
    "(repeatable). Private, loopback and link-local hosts only when a prefix names them.",
)
@click.option(
    "--http",
    "http_address",
    metavar="[HOST:]PORT",
    help="Serve streamable HTTP at http://HOST:PORT/mcp instead of stdio; HOST is "
    "127.0.0.1 unless given (PORT 0: any free port).",
)
@click.option(
    "--allow-remote",
    is_flag=True,
    help="With --http: allow a HOST that is not loopback (e.g. 0.0.0.0), reachable from "
    "other machines. Clients must then send a bearer token (see --token-env).",
)
@click.option(
    "--token-env",
    metavar="NAME",
    help="With --http: every client must send Authorization: Bearer <token>, the token "
    "being the value of environment variable NAME. A HOST that is not loopback always needs "
    "a token: without this option one is made up and shown once on stderr.",
)
@click.option(
    "--structured-only",
    is_flag=True,
    help="Answer with structured content only, without the same answer again as JSON "
    "text (for clients that read structured content; the MCP specification asks for the "
    "text copy by default).",
)
@pass_app
def serve(
    app: App,
    roots: tuple[Path, ...],
    allow_urls: tuple[str, ...],
    http_address: str | None,
    allow_remote: bool,
    token_env: str | None,
    structured_only: bool,
) -> None:
    """Run the MCP server over stdio (or streamable HTTP with --http), for agents (needs the
    [mcp] extra).

    Over stdio, stdout carries only the protocol; logs go to stderr. Agents may add files
    only under --root folders and web pages only under --allow-url prefixes. Over HTTP the
    server answers only requests addressed to it (Host, Origin); on a HOST that is not
    loopback, only those with its bearer token.
    """
    from knowledge_agent.crawl.policy import is_loopback

    address: tuple[str, int] | None = None
    if http_address is not None:
        host, _, port_text = http_address.strip().rpartition(":")
        host = host.strip("[]") or "127.0.0.1"
        if not port_text.isdigit() or int(port_text) > 65535:
            raise click.BadParameter(
                f"{http_address!r} is not [HOST:]PORT (e.g. 8765 or 127.0.0.1:8765)",
                param_hint="--http",
            )
        if not is_loopback(host) and not allow_remote:
            raise click.UsageError(
                f"--http {http_address}: {host} is not a loopback address, so other machines "
                "could reach the server; pass --allow-remote to serve there (clients then "
                "need its bearer token)"
            )
        address = (host, int(port_text))
    else:
        for given, option in ((allow_remote, "--allow-remote"), (token_env, "--token-env")):
            if given:
                raise click.UsageError(f"{option} applies only with --http [HOST:]PORT")
    app.settings  # noqa: B018 - a bad project file fails here, before the protocol starts
    resolved = [root.resolve() for root in roots]
    try:
        if address is None:
            from knowledge_agent.server import run_stdio

            run_stdio(
                app.new_core,
                roots=resolved,
                allow_urls=allow_urls,
                text_content=not structured_only,
            )
            return
        from knowledge_agent.server import bind_http

        token = _server_token(token_env, remote=not is_loopback(address[0]))
        server = bind_http(
            app.new_core,
            host=address[0],
            port=address[1],
            roots=resolved,
            allow_urls=allow_urls,
            allow_remote=allow_remote,
            token=token,
            text_content=not structured_only,
        )
        click.echo(f"Serving MCP (streamable HTTP) at {server.url}; Ctrl-C stops.", err=True)
        if not is_loopback(address[0]):
            click.echo(
                f"Warning: {address[0]} is reachable from other machines; only clients that "
                "send Authorization: Bearer <token> are answered.",
                err=True,
            )
        if token is not None and token_env is None:
            # Made up for this run: shown once, on stderr (stdout may be logged or piped).
            click.echo(f"Bearer token for this server (shown once): {token}", err=True)
        server.serve()
    except ImportError as exc:
        if _missing_mcp(exc):
            raise ConfigError(MCP_EXTRA_MESSAGE) from exc
        raise


def _server_token(token_env: str | None, *, remote: bool) -> str | None:
    """The HTTP server's bearer token: the value of ``$token_env``, or one made up when the
    server is reachable from other machines (``remote``); None when it needs none."""
    if token_env is not None:
        from knowledge_agent.server.http_guard import check_token

        return check_token(os.environ.get(token_env, ""), f"${token_env} (--token-env)")
    return secrets.token_urlsafe(32) if remote else None


def _missing_mcp(exc: BaseException | None) -> bool:
    """Whether an ImportError (or one it was raised from) is about the ``mcp`` package."""
    while exc is not None:
        if isinstance(exc, ImportError) and (exc.name or "").split(".")[0] == "mcp":
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def _copy_tree(source: Traversable, target: Path) -> None:
    """Copy packaged files (importlib.resources works from a wheel or a zip too)."""
    target.mkdir(parents=True, exist_ok=True)
    for entry in source.iterdir():
        if entry.name.startswith((".", "__pycache__")):
            continue
        if entry.is_dir():
            _copy_tree(entry, target / entry.name)
        else:
            (target / entry.name).write_bytes(entry.read_bytes())


@cli.command()
def demo() -> None:
    """Index the bundled samples in a throwaway folder and answer three queries.

    The samples (Markdown guides, a PDF postmortem, a Python module and a Chinese FAQ)
    ship inside the package. The demo ignores --data-dir: nothing is written outside a
    temporary folder.
    """
    console = render.make_console()
    with tempfile.TemporaryDirectory(prefix="knowledge-agent-demo-") as folder:
        samples = Path(folder) / "samples"
        _copy_tree(resources.files("knowledge_agent") / "samples", samples)
        from knowledge_agent.core.knowledge_agent_core import KnowledgeAgentCore

        with KnowledgeAgentCore(Path(folder) / "data") as core:
            report = core.collect_knowledge(samples, kb="demo")
            console.print(
                f"Indexed {report.processed} sample files as {report.chunks_added} chunks "
                f"in {report.duration_s:.2f} s.",
                style="bold",
            )
            render.print_issues(console, "failed", report.failed, style="red")
            for query in DEMO_QUERIES:
                console.print()
                console.print(f"── Query: {query}", style="bold")
                render.print_results(
                    console,
                    core.search(query, limit=2),
                    base=folder,
                    query=query,
                    analyzer=core.analyzer,
                )


if __name__ == "__main__":  # pragma: no cover
    main()
