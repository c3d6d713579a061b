"""The crawl loop: a page, a sitemap or a site, breadth first, with worker threads.

Threads and ownership::

    consumer thread (iterates the Crawler)      worker threads (``concurrency`` of them)
      frontier, scope, dedupe, depth, counts  ->  task queue  ->  Fetcher.get, links,
      events yielded in completion order     <-  result queue <-  sitemap parsing

Only the consumer thread touches the crawl's state, so it needs no lock; workers share
the ``httpx.Client``, the robots.txt cache and the per-host throttle, which lock for
themselves. Depth is exact breadth-first depth: a page of depth ``d + 1`` is not
requested while one of depth ``d`` is in flight, so every page is first reached by its
shortest path whatever order the responses come back in. Stopping never waits for a
worker: they are daemon threads, and one blocked in a read is abandoned and discarded.

Bounds, so a hostile site costs little: each request has a total deadline (the consumer
fails a task whose current hop started more than ``timeout`` ago, even while its worker
is still blocked in a read, and drops the late result); the crawl stops after
``max_time``; the frontier holds at most :data:`FRONTIER_FACTOR` × ``max_pages`` URLs;
at most :data:`~knowledge_agent.crawl.sitemap.MAX_SITEMAPS` sitemaps are fetched, each
parsed as it streams in and only until the crawl has enough URLs. A bound that cuts the
crawl short makes it incomplete and is named in :attr:`CrawlSummary.limits`.
"""

from __future__ import annotations

import collections
import hashlib
import logging
import queue
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from types import TracebackType
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from knowledge_agent.crawl.fetch import (
    PAGE_TYPES,
    POLICY_REFUSAL,
    SITEMAP_TYPES,
    Fetcher,
    Response,
    SinkFor,
    Stopped,
    Throttle,
    format_seconds,
    require_httpx,
    timed_out,
)
from knowledge_agent.crawl.links import extract_links
from knowledge_agent.crawl.options import CrawlOptions
from knowledge_agent.crawl.policy import UrlPolicy
from knowledge_agent.crawl.results import CrawlFailure, CrawlPage, CrawlSummary, KnownPage
from knowledge_agent.crawl.robots import (
    MAX_ROBOTS_BYTES,
    RobotsCache,
    RobotsRules,
    allow_all,
    parse_robots,
)
from knowledge_agent.crawl.sitemap import (
    MAX_SITEMAP_BYTES,
    MAX_SITEMAP_NESTING,
    MAX_SITEMAPS,
    NotASitemap,
    Sitemap,
    SitemapParser,
)
from knowledge_agent.crawl.urls import (
    key_of_normalized,
    matches_any,
    normalize_url,
    origin_of,
    url_key,
)
from knowledge_agent.errors import ConfigError
from knowledge_agent.processors.encoding import decode_bytes

if TYPE_CHECKING:
    import httpx

__all__ = ["FRONTIER_FACTOR", "Crawler"]

logger = logging.getLogger(__name__)

_POLL = 0.1  # how often a waiting thread looks at the stop flag, in seconds
# The watchdog is the backstop: a worker's own deadline (httpx's timeouts, the read loop)
# gets this long to report first, so a robots.txt that timed out inside a page's task
# does not also fail the page.
_GRACE = 0.25
_HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
_SITEMAP_SUFFIXES = (".xml", ".xml.gz")

FRONTIER_FACTOR = 4
"""The crawl queues at most this many times ``max_pages`` URLs. Listed and linked URLs
may turn out skipped (robots.txt, type, size), gone, failing or duplicates through
redirects: four times leaves room for three in four to yield nothing, while a sitemap of
a million URLs costs a few thousand strings, not a million."""


@dataclass(frozen=True)
class _Task:
    url: str
    key: str
    depth: int
    kind: str  # "start" (a page or a sitemap, by its answer), "page" or "sitemap"
    level: int = 0  # how deep in sitemap indexes a sitemap is
    budget: int = 0  # page URLs the crawl can still queue, should this be a urlset
    slots: int = 0  # sitemaps the crawl can still fetch, should this be a sitemap index


@dataclass(frozen=True)
class _Scope:
    """Which URLs belong to the crawl: origins and globs. Immutable, so worker threads
    can read the current one while the consumer replaces it."""

    origins: frozenset[str]
    same_origin: bool
    include: tuple[str, ...]
    exclude: tuple[str, ...]

    def with_origin(self, origin: str) -> _Scope:
        return replace(self, origins=self.origins | {origin})

    def same(self, url: str) -> bool:
        return not self.same_origin or origin_of(url) in self.origins

    def contains(self, url: str) -> bool:
        """Whether a link or listed URL belongs to this crawl (origin and globs)."""
        if not self.same(url):
            return False
        if self.include and not matches_any(url, self.include):
            return False
        return not matches_any(url, self.exclude)


@dataclass(frozen=True)
class _SitemapFound:
    url: str  # the sitemap's final URL, against which relative <loc>s resolve
    sitemap: Sitemap
    off_origin: collections.Counter[str]  # locs left out as on another origin, by origin


@dataclass(frozen=True)
class _Listing:
    """A sitemap being parsed as it streams in: where from, and what its parser left out
    as on another origin (counted by origin)."""

    url: str
    parser: SitemapParser
    off_origin: collections.Counter[str]


_Outcome = CrawlPage | CrawlFailure | _SitemapFound


class Crawler:
    """Crawl one page, a sitemap or a site; iterate it for pages and failures.

    ``known`` maps the ``url_key`` of pages from the last crawl to what was remembered of
    them (conditional requests, unchanged detection, links of a 304); ``policy`` restricts
    every request and every hop: pages, redirects, robots.txt, sitemaps. Without one, the
    crawl is the user's own and gets :meth:`UrlPolicy.for_user` (any http(s) URL; a
    private address only on the start URL's host, unless ``options.allow_private``).
    ``transport`` replaces the network (tests). Use it as a context manager: leaving it
    stops the crawl and closes the client at once, even with requests in flight. A
    crawler runs once.
    """

    def __init__(
        self,
        start_url: str,
        options: CrawlOptions | None = None,
        *,
        known: Mapping[str, KnownPage] | None = None,
        policy: UrlPolicy | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        require_httpx()
        self._options = options if options is not None else CrawlOptions()
        try:
            self._start = normalize_url(start_url)
        except ValueError as exc:
            raise ConfigError(f"cannot crawl {start_url!r}: {exc}") from exc
        self._known = _rekey(known or {})
        if policy is None:
            policy = UrlPolicy.for_user(self._start, allow_private=self._options.allow_private)
        self._policy = policy
        self._transport = transport
        self._stop = threading.Event()
        options = self._options
        self._scope = _Scope(
            frozenset({origin_of(self._start)}),
            options.same_origin,
            options.include,
            options.exclude,
        )
        self._frontier = FRONTIER_FACTOR * options.max_pages
        path = self._start.split("?", 1)[0].lower()
        if path.endswith(_SITEMAP_SUFFIXES):
            self._mode = "sitemap"
        else:
            self._mode = "page" if self._options.max_depth == 0 else "site"
        # Consumer-thread state.
        self._pages: collections.deque[_Task] = collections.deque()
        self._sitemaps: collections.deque[_Task] = collections.deque()
        self._scheduled: set[str] = set()  # keys of pages queued or done
        self._sitemap_keys: set[str] = set()
        self._event_keys: set[str] = set()
        self._in_flight: dict[int, _Task] = {}
        self._depths: collections.Counter[int] = collections.Counter()
        self._counts = collections.Counter[str]()
        self._off_origin = collections.Counter[str]()  # sitemap locs on other origins
        self._scope_failed = False  # the start URL or a sitemap could not be read
        self._limits: list[str] = []  # bounds that cut the crawl short, in words
        self._sitemaps_sent = 0
        self._exhausted = False  # the frontier ran dry (not stopped)
        self._started = False
        self._ended = False
        self._started_at = 0.0
        self._seconds = 0.0
        # Shared with the workers.
        self._tasks: queue.Queue[tuple[int, _Task]] = queue.Queue()
        self._results: queue.Queue[tuple[int, _Outcome]] = queue.Queue()
        self._hops: dict[int, float] = {}  # task id -> when its current hop started
        self._local = threading.local()  # the task id a worker thread is on
        self._client: httpx.Client | None = None
        self._fetcher: Fetcher | None = None
        self._robots: RobotsCache | None = None
        self._next_id = 0

    # -- public ------------------------------------------------------------------

    def __enter__(self) -> Crawler:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._end()

    def __iter__(self) -> Iterator[CrawlPage | CrawlFailure]:
        if self._started:
            raise RuntimeError("a Crawler runs once; make a new one to crawl again")
        self._started = True
        return self._run()

    def stop(self) -> None:
        """End the crawl soon (within about a second); safe from any thread."""
        self._stop.set()

    @property
    def summary(self) -> CrawlSummary:
        """Counts and the keys seen: final once the iteration has ended, a snapshot of
        the progress before (readable from any thread)."""
        # Copies made in one C call each, so another thread's changes cannot break them.
        pending = tuple(self._pages)
        in_flight = tuple(self._in_flight.values())
        keys = set(self._event_keys)
        counts = collections.Counter(dict(self._counts))
        seen = keys.union(task.key for task in pending)
        seen.update(task.key for task in in_flight if task.kind != "sitemap")
        leftover = any(task.key not in keys for task in pending)
        limits = tuple(self._limits)
        complete = (
            self._exhausted
            and not leftover
            and not self._sitemaps
            and not self._scope_failed
            and not limits
        )
        seconds = self._seconds if self._ended else _elapsed(self._started_at)
        return CrawlSummary(
            complete=complete,
            seen=frozenset(seen),
            pages=counts["pages"],
            unchanged=counts["unchanged"],
            failures=counts["failures"],
            skipped=counts["skipped"],
            bytes=self._fetcher.bytes_read if self._fetcher is not None else 0,
            seconds=seconds,
            mode=self._mode,
            limits=limits,
            off_origin=tuple(self._off_origin.most_common()),
        )

    # -- the loop (consumer thread) ----------------------------------------------

    def _run(self) -> Iterator[CrawlPage | CrawlFailure]:
        if self._ended:  # closed before the first page was asked for
            return
        self._started_at = time.monotonic()
        logger.info("crawling %s (%s)", self._start, self._mode)
        try:
            self._open()
            kind = "sitemap" if self._mode == "sitemap" else "start"
            self._queue(_Task(self._start, url_key(self._start), 0, kind))
            while not self._stop.is_set() and not self._out_of_time():
                self._dispatch()
                if not self._in_flight:
                    self._exhausted = True
                    break
                overdue = self._overdue()
                for task in overdue:
                    failure = CrawlFailure(task.url, timed_out(self._options.timeout), False)
                    yield from self._handle(task, failure)
                if overdue:
                    continue
                try:
                    task_id, outcome = self._results.get(timeout=_POLL)
                except queue.Empty:
                    continue
                task = self._finish(task_id)
                if task is not None:
                    yield from self._handle(task, outcome)
        finally:
            self._end()
        counts = self._counts
        logger.info(
            "crawl of %s ended: %d pages (%d unchanged), %d failures, %d skipped in %.1f s",
            self._start,
            counts["pages"],
            counts["unchanged"],
            counts["failures"],
            counts["skipped"],
            self._seconds,
        )

    def _open(self) -> None:
        from knowledge_agent.crawl.transport import make_client

        options = self._options
        self._client = make_client(options, policy=self._policy, transport=self._transport)
        self._fetcher = Fetcher(
            self._client,
            timeout=options.timeout,
            follow_redirects=options.follow_redirects,
            max_redirects=options.max_redirects,
            throttle=Throttle(options.delay),
            stop=self._stop,
            on_hop=self._note_hop,
        )
        self._robots = RobotsCache(self._load_robots)
        for number in range(options.concurrency):
            name = f"crawl-worker-{number}"
            threading.Thread(target=self._work_loop, name=name, daemon=True).start()

    def _end(self) -> None:
        if self._ended:
            return
        self._ended = True
        self._stop.set()
        self._seconds = _elapsed(self._started_at) if self._started_at else 0.0
        client, self._client = self._client, None
        if client is not None:
            # Closing never waits for a worker stuck in a read: its socket is closed
            # under it and its result is dropped.
            try:
                client.close()
            except Exception:
                logger.debug("closing the crawl's HTTP client failed", exc_info=True)

    def _out_of_time(self) -> bool:
        """Whether ``max_time`` has passed (noted in the summary when it has)."""
        max_time = self._options.max_time
        if _elapsed(self._started_at) < max_time:
            return False
        logger.warning("crawl of %s stopped after %s s (max_time)", self._start, max_time)
        self._note(f"crawl stopped after {format_seconds(max_time)} s (max_time)")
        return True

    def _overdue(self) -> list[_Task]:
        """Tasks whose current hop started more than ``timeout`` ago, taken out of the
        crawl: their worker may still be blocked in a read; its late result is dropped."""
        limit = time.monotonic() - self._options.timeout - _GRACE
        late = [tid for tid, started in self._hops.copy().items() if started < limit]
        tasks = [self._finish(task_id) for task_id in late]
        return [task for task in tasks if task is not None]

    def _note_hop(self, started: float | None) -> None:
        """Called by the fetcher in a worker thread as each hop starts and ends."""
        task_id = getattr(self._local, "task_id", None)
        if task_id is None:
            return
        if started is None:
            self._hops.pop(task_id, None)
        else:
            self._hops[task_id] = started

    def _frontier_full(self) -> str:
        return (
            f"more than {self._frontier} URLs found ({FRONTIER_FACTOR} × max_pages): "
            "the rest were not queued"
        )

    def _note(self, limit: str) -> None:
        if limit not in self._limits:
            self._limits.append(limit)

    def _queue(self, task: _Task) -> None:
        if task.kind == "sitemap":
            self._sitemap_keys.add(task.key)
            self._sitemaps.append(task)
        elif len(self._scheduled) >= self._frontier:
            self._note(self._frontier_full())
        else:
            self._scheduled.add(task.key)
            self._pages.append(task)

    def _dispatch(self) -> None:
        """Hand tasks to the workers: sitemaps first, then pages of the lowest depth,
        while fewer than ``concurrency`` are out and ``max_pages`` allows."""
        limit = self._options.concurrency
        while len(self._in_flight) < limit and self._sitemaps:
            if self._sitemaps_sent >= MAX_SITEMAPS:
                self._note(f"more than {MAX_SITEMAPS} sitemaps: the rest were not read")
                self._sitemaps.clear()
                break
            if len(self._scheduled) >= self._frontier:
                self._note(self._frontier_full())
                self._sitemaps.clear()  # what they list could not be queued
                break
            self._sitemaps_sent += 1
            self._send(self._sitemaps.popleft())
        while len(self._in_flight) < limit and self._pages:
            task = self._pages[0]
            if task.key in self._event_keys:  # reached meanwhile through a redirect
                self._pages.popleft()
                continue
            if self._depths and task.depth > min(self._depths):
                break  # shallower pages first: their links may reach this one sooner
            if self._counts["pages"] + sum(self._depths.values()) >= self._options.max_pages:
                break
            self._send(self._pages.popleft())

    def _send(self, task: _Task) -> None:
        # What a sitemap may add, fixed now: the worker parsing it cannot ask the consumer.
        budget = max(0, self._frontier - len(self._scheduled))
        slots = max(0, MAX_SITEMAPS - self._sitemaps_sent - len(self._sitemaps))
        task = replace(task, budget=budget, slots=slots)
        self._next_id += 1
        self._in_flight[self._next_id] = task
        if task.kind != "sitemap":
            self._depths[task.depth] += 1
        self._tasks.put((self._next_id, task))

    def _finish(self, task_id: int) -> _Task | None:
        self._hops.pop(task_id, None)
        task = self._in_flight.pop(task_id, None)
        if task is not None and task.kind != "sitemap":
            self._depths[task.depth] -= 1
            if not self._depths[task.depth]:
                del self._depths[task.depth]
        return task

    def _handle(self, task: _Task, outcome: _Outcome) -> Iterator[CrawlPage | CrawlFailure]:
        if isinstance(outcome, _SitemapFound):
            self._mode = "sitemap"
            yield from self._list(task, outcome)
        elif isinstance(outcome, CrawlFailure):
            failure = replace(outcome, url=task.url, depth=task.depth)
            if task.kind != "page":
                self._scope_failed = True  # without it, which pages exist is unknown
            self._count_failure(failure)
            known = self._known.get(task.key)
            if known is not None and not failure.skipped and not failure.gone:
                # A passing error hides this page's links: follow the remembered ones.
                self._follow(known.links, task.depth)
            yield failure
        else:
            if outcome.key in self._event_keys:
                return  # two URLs redirected to one page; it was yielded already
            if task.kind == "start" and outcome.url != task.url:
                # http://site redirecting to https://site: the site is where it landed.
                self._scope = self._scope.with_origin(origin_of(outcome.url))
            self._event_keys.add(outcome.key)
            self._scheduled.add(outcome.key)
            self._counts["pages"] += 1
            self._counts["unchanged"] += outcome.unchanged
            if self._mode == "site":
                self._follow(outcome.links, task.depth)
            yield outcome

    def _count_failure(self, failure: CrawlFailure) -> None:
        self._event_keys.add(url_key(failure.url))
        self._counts["skipped" if failure.skipped else "failures"] += 1

    def _follow(self, links: tuple[str, ...], depth: int) -> None:
        if self._mode != "site" or depth >= self._options.max_depth:
            return
        for link in links:
            try:
                url = normalize_url(link)  # cheap: extracted links are normalised already
            except ValueError:
                continue
            key = key_of_normalized(url)
            if key not in self._scheduled and self._scope.contains(url):
                self._queue(_Task(url, key, depth + 1, "page"))

    def _list(self, task: _Task, found: _SitemapFound) -> Iterator[CrawlFailure]:
        """Queue what a sitemap lists (normalised and in scope already, see
        :meth:`_sitemap_parser`): pages, or (for an index) more sitemaps."""
        sitemap = found.sitemap
        self._off_origin.update(found.off_origin)
        if _is_start(task):
            self._scope = self._scope.with_origin(origin_of(found.url))
        if sitemap.truncated:
            if sitemap.kind == "urlset":
                self._note("a sitemap lists more URLs than the crawl keeps: read in part")
            else:
                self._note(f"more than {MAX_SITEMAPS} sitemaps: the rest were not read")
        for url in sitemap.locs:
            key = key_of_normalized(url)
            if sitemap.kind == "urlset":
                if key not in self._scheduled:
                    self._queue(_Task(url, key, 0, "page"))
            elif key not in self._sitemap_keys:
                if task.level + 1 > MAX_SITEMAP_NESTING:
                    reason = f"sitemap nested deeper than {MAX_SITEMAP_NESTING} levels"
                    failure = CrawlFailure(url=url, reason=reason, skipped=True)
                    self._sitemap_keys.add(key)
                    self._scope_failed = True
                    self._count_failure(failure)
                    yield failure
                else:
                    self._queue(_Task(url, key, 0, "sitemap", task.level + 1))

    # -- the workers -------------------------------------------------------------

    def _work_loop(self) -> None:
        while not self._stop.is_set():
            try:
                task_id, task = self._tasks.get(timeout=_POLL)
            except queue.Empty:
                continue
            self._local.task_id = task_id
            try:
                outcome = self._work(task)
            except Stopped:
                return
            except Exception as exc:  # a bug must cost one URL, not the crawl
                if self._stop.is_set():
                    return
                logger.exception("crawling %s failed", task.url)
                outcome = CrawlFailure(
                    url=task.url, reason=f"internal error: {exc!r}", skipped=False
                )
            finally:
                self._local.task_id = None
            if self._stop.is_set():
                return
            self._results.put((task_id, outcome))

    def _work(self, task: _Task) -> _Outcome:
        fetcher = self._fetcher
        assert fetcher is not None
        if task.kind == "sitemap":
            return self._fetch_sitemap(fetcher, task)
        start = task.kind == "start"
        parsers: list[_Listing] = []
        answer = fetcher.get(
            task.url,
            check=lambda url, hop: self._check_page(task, url, hop),
            accept=PAGE_TYPES | SITEMAP_TYPES if start else PAGE_TYPES,
            max_bytes=self._options.max_page_bytes,
            known=self._known.get,
            sink_for=self._sitemap_sink(task, parsers) if start else None,
        )
        if isinstance(answer, CrawlFailure):
            return answer
        if answer.content_type in SITEMAP_TYPES and answer.status != 304:
            if not parsers:  # the type came from the body's first bytes: it is read already
                listing = self._sitemap_parser(task, answer.url)
                listing.parser.feed(answer.body)
                parsers.append(listing)
            return self._sitemap_found(task, answer, parsers[-1])
        return self._page(task, answer)

    def _fetch_sitemap(self, fetcher: Fetcher, task: _Task) -> _Outcome:
        parsers: list[_Listing] = []
        answer = fetcher.get(
            task.url,
            check=lambda url, _hop: self._policy_skip(url),
            accept=None,
            max_bytes=MAX_SITEMAP_BYTES,
            sink_for=self._sitemap_sink(task, parsers),
        )
        if isinstance(answer, CrawlFailure):
            return answer
        return self._sitemap_found(task, answer, parsers[-1])  # a 2xx: its body was parsed

    def _sitemap_sink(self, task: _Task, parsers: list[_Listing]) -> SinkFor:
        """A sink that parses a sitemap as it streams in (for a start URL: only when its
        type says XML); its listing is left in ``parsers``."""

        def sink_for(url: str, media: str) -> SitemapParser | None:
            if task.kind == "start" and media not in SITEMAP_TYPES:
                return None
            listing = self._sitemap_parser(task, url)
            parsers.append(listing)
            return listing.parser

        return sink_for

    def _sitemap_parser(self, task: _Task, base: str) -> _Listing:
        """A parser keeping the in-scope locs of the sitemap at ``base``, normalised, up
        to the task's budget (pages) or slots (sitemaps); it counts the locs it leaves out
        as on another origin."""
        scope = self._scope
        if _is_start(task):
            scope = scope.with_origin(origin_of(base))  # as _list will do
        off_origin = collections.Counter[str]()

        def keep(kind: str, loc: str) -> str | None:
            try:
                url = normalize_url(loc, base)
            except ValueError:
                logger.debug("sitemap %s lists a URL we cannot fetch: %r", base, loc)
                return None
            if not scope.same(url):
                off_origin[origin_of(url)] += 1
                return None
            return url if kind != "urlset" or scope.contains(url) else None

        parser = SitemapParser(
            keep=keep, max_urls=task.budget, max_sitemaps=task.slots, max_bytes=MAX_SITEMAP_BYTES
        )
        return _Listing(base, parser, off_origin)

    def _sitemap_found(self, task: _Task, answer: Response, listing: _Listing) -> _Outcome:
        url, parser = listing.url, listing.parser
        try:
            return _SitemapFound(url, parser.close(), listing.off_origin)
        except NotASitemap as exc:
            if task.kind == "start":  # an XML answer that is something else: not indexed
                reason = f"unsupported content type {answer.content_type}"
                return CrawlFailure(url, reason, skipped=True, status=answer.status)
            return CrawlFailure(task.url, f"not a sitemap: {exc}", False, answer.status)
        except ValueError as exc:
            return CrawlFailure(task.url, f"not a sitemap: {exc}", False, answer.status)

    def _page(self, task: _Task, answer: Response) -> CrawlPage:
        known = answer.known
        if answer.status == 304 and known is not None:
            content_hash = known.content_hash or ""
            links = tuple(known.links)
            unchanged = True
        else:
            content_hash = hashlib.sha256(answer.body).hexdigest()
            links = ()
            if answer.content_type in _HTML_TYPES:
                links = extract_links(answer.body, answer.url, answer.charset)
            known = known or self._known.get(url_key(answer.url))
            unchanged = known is not None and known.content_hash == content_hash
        return CrawlPage(
            url=answer.url,
            key=url_key(answer.url),
            requested_url=task.url,
            depth=task.depth,
            status=answer.status,
            content_type=answer.content_type,
            charset=answer.charset,
            body=answer.body,
            etag=answer.etag,
            last_modified=answer.last_modified,
            content_hash=content_hash,
            unchanged=unchanged,
            links=links,
        )

    def _check_page(self, task: _Task, url: str, hop: int) -> CrawlFailure | None:
        """May this hop of a page request go out? Policy, scope (for redirects), robots."""
        refused = self._policy_skip(url)
        if refused is not None:
            return refused
        if hop and task.kind != "start" and not self._scope.contains(url):
            return _skip(url, "outside the crawl's scope")
        if self._options.respect_robots and self._robots is not None:
            rules = self._robots.rules(origin_of(url))
            if not rules.allows(url):
                return _skip(url, "disallowed by robots.txt")
        return None

    def _policy_skip(self, url: str) -> CrawlFailure | None:
        reason = self._policy.refusal(url)
        return None if reason is None else _skip(url, POLICY_REFUSAL + reason)

    def _load_robots(self, origin: str) -> RobotsRules:
        """Fetch and parse ``origin``'s robots.txt (in a worker, once per origin)."""
        fetcher = self._fetcher
        agent = self._options.user_agent
        assert fetcher is not None
        robots_url = origin + "/robots.txt"
        answer = fetcher.get(
            robots_url,
            check=lambda url, _hop: self._robots_skip(url),
            accept=None,
            max_bytes=MAX_ROBOTS_BYTES,
            truncate=True,
        )
        if isinstance(answer, CrawlFailure):
            status = answer.status
            if status is not None and 400 <= status < 500:
                return allow_all(agent)  # no robots.txt: everything is allowed
            logger.warning(
                "robots.txt of %s unreadable (%s): crawling it all", origin, answer.reason
            )
            return allow_all(agent)
        text, _ = decode_bytes(answer.body)
        rules = parse_robots(text, agent)
        if rules.crawl_delay:
            logger.info("%s asks for %s s between requests", origin, rules.crawl_delay)
            fetcher.throttle.set_minimum(urlsplit(origin).netloc, rules.crawl_delay)
        return rules

    def _robots_skip(self, url: str) -> CrawlFailure | None:
        reason = self._policy.robots_refusal(url)
        return None if reason is None else _skip(url, POLICY_REFUSAL + reason)


def _is_start(task: _Task) -> bool:
    """The start URL's task (a sitemap start is the only sitemap of level 0)."""
    return task.kind == "start" or (task.kind == "sitemap" and task.level == 0)


def _skip(url: str, reason: str) -> CrawlFailure:
    return CrawlFailure(url=url, reason=reason, skipped=True)


def _rekey(known: Mapping[str, KnownPage]) -> dict[str, KnownPage]:
    """Known pages by :func:`url_key` (the caller's keys should be that already)."""
    pages: dict[str, KnownPage] = {}
    for key, page in known.items():
        try:
            pages[url_key(key)] = page
        except ValueError:
            logger.debug("ignoring a known page with a key that is no URL: %r", key)
    return pages


def _elapsed(since: float) -> float:
    return time.monotonic() - since if since else 0.0
