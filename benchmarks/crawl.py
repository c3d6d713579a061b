"""Crawling a documentation site into a knowledge base, over loopback, beside plain fetches.

    python benchmarks/crawl.py                    # about 300 pages, under a minute
    python benchmarks/crawl.py --concurrency 8 --json crawl.json

A site of real text is served on 127.0.0.1 from a thread (``tests/web_site.py``): every
squad-long article (../shared/datasets or --datasets DIR) becomes a chain of HTML pages of a
few paragraphs each, under ``<h2 id=…>`` sections, reached from a home page through the
article's first page (depth 3 at most). Measured in one run, on the same pages:

- ``urllib``: the standard library fetching every page one after another (the network floor);
- ``crawler``: this package's crawler alone (robots.txt, link extraction, normalisation);
- ``crawl + index``: ``collect_knowledge(URL)`` into a fresh on-disk knowledge base — fetch,
  extract, chunk, store and index; the figure the README quotes;
- ``re-crawl``: the same again with nothing changed (one conditional request a page);
- ``files + index``: the same pages as .html files collected from a folder (what indexing
  costs without the network);

and how long ``stop()`` (Ctrl-C) takes to end a crawl while a request hangs.

Times on a shared machine are noise; the ratios between the rows carry across machines.
"""

from __future__ import annotations

import argparse
import html
import json
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if __package__ in (None, ""):  # run as a script: import the harness as the `benchmarks` package
    sys.path[0] = str(ROOT)
sys.path.insert(1, str(ROOT / "tests"))  # the loopback site server of the tests

from web_site import SiteServer  # noqa: E402

from benchmarks.datasets import Document, default_datasets_dir, load_dataset  # noqa: E402
from knowledge_agent import KnowledgeAgentCore  # noqa: E402
from knowledge_agent.crawl import Crawler, CrawlOptions, CrawlPage  # noqa: E402


def build_site(server: SiteServer, articles: list[Document], per_page: int) -> list[str]:
    """Serve every article as a chain of pages; returns every page's path, home first."""
    firsts: list[tuple[str, str]] = []
    paths: list[str] = ["/"]
    for number, article in enumerate(articles):
        paragraphs = [p.strip() for p in article.text.split("\n") if p.strip()]
        chunks = [paragraphs[i : i + per_page] for i in range(0, len(paragraphs), per_page)]
        chain = [f"/a{number}/p{index}.html" for index in range(len(chunks))]
        for index, (path, chunk) in enumerate(zip(chain, chunks, strict=True)):
            sections = "".join(
                f'<h2 id="s{index}-{n}">Part {index}.{n}</h2>\n<p>{html.escape(text)}</p>\n'
                for n, text in enumerate(chunk)
            )
            following = chain[index + 1 : index + 4]  # next pages: depth grows slowly
            links = "".join(f'<a href="{p}">next</a> ' for p in following)
            page = (
                f"<!DOCTYPE html><html><head><meta charset='utf-8'>"
                f"<title>{html.escape(article.title)} ({index + 1})</title></head>"
                f"<body><nav><a href='/'>home</a></nav><main><h1>{html.escape(article.title)}"
                f"</h1>\n{sections}<p>{links}</p></main></body></html>"
            )
            server.set_page(path, page)
        firsts.append((chain[0], article.title))
        paths.extend(chain)
    home = "".join(f'<li><a href="{p}">{html.escape(t)}</a></li>' for p, t in firsts)
    server.set_page("/", f"<title>Library</title><main><ul>{home}</ul></main>")
    return paths


def timed(run: Callable[[], Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    value = run()
    return time.perf_counter() - started, value


def fetch_all(urls: list[str]) -> int:
    total = 0
    for url in urls:
        with urllib.request.urlopen(url, timeout=10) as answer:
            total += len(answer.read())
    return total


def crawl_only(start: str, options: CrawlOptions) -> tuple[int, int]:
    pages = size = 0
    with Crawler(start, options) as crawler:
        for event in crawler:
            if isinstance(event, CrawlPage):
                pages += 1
                size += len(event.body)
    return pages, size


def stop_latency(server: SiteServer) -> float:
    """Seconds from ``stop()`` to the end of the iteration while a request hangs (10 s)."""
    server.set_page("/stop/", '<a href="/stop/slow.html">slow</a> <a href="/stop/a.html">a</a>')
    server.set_page("/stop/a.html", "<p>a</p>")
    server.set_slow("/stop/slow.html", 10.0)
    stopped = 0.0
    with Crawler(server.url("/stop/"), CrawlOptions(timeout=30)) as crawler:
        for event in crawler:
            if event.url.endswith("/a.html"):
                while not server.hits("/stop/slow.html"):
                    time.sleep(0.01)
                stopped = time.perf_counter()
                crawler.stop()
    return time.perf_counter() - stopped


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", type=Path, default=None, help="folder of the data sets")
    parser.add_argument("--per-page", type=int, default=6, help="paragraphs per page")
    parser.add_argument("--concurrency", type=int, default=4, help="crawler requests at once")
    parser.add_argument("--json", type=Path, help="write the figures here too")
    args = parser.parse_args(argv)

    articles = load_dataset("squad-long", args.datasets or default_datasets_dir()).documents
    options = CrawlOptions(max_depth=50, max_pages=100_000, concurrency=args.concurrency)
    rows: list[dict[str, Any]] = []

    def row(name: str, seconds: float, pages: int, size: int) -> None:
        rows.append(
            {
                "system": name,
                "seconds": round(seconds, 3),
                "pages": pages,
                "mb": round(size / 1e6, 2),
                "pages_per_s": round(pages / seconds, 1),
                "mb_per_s": round(size / 1e6 / seconds, 2),
            }
        )
        print(f"[{name}] {pages} pages in {seconds:.2f} s", file=sys.stderr)

    with SiteServer() as server, tempfile.TemporaryDirectory() as temp:
        paths = build_site(server, articles, args.per_page)
        urls = [server.url(path) for path in paths]
        seconds, size = timed(lambda: fetch_all(urls))
        row("urllib (sequential)", seconds, len(urls), size)
        seconds, (pages, size) = timed(lambda: crawl_only(urls[0], options))
        row("crawler", seconds, pages, size)
        with KnowledgeAgentCore(Path(temp) / "web") as core:
            seconds, report = timed(lambda: core.collect_knowledge(urls[0], crawl=options))
            row("crawl + index", seconds, report.processed, report.bytes_processed)
            seconds, again = timed(lambda: core.collect_knowledge(urls[0], crawl=options))
            row("re-crawl, unchanged", seconds, again.unchanged, 0)
            chunks = core.status().to_dict()["chunks"]
        folder = Path(temp) / "pages"
        for path in paths:
            target = folder / (path.strip("/") or "index.html")
            target.parent.mkdir(parents=True, exist_ok=True)
            with urllib.request.urlopen(server.url(path), timeout=10) as answer:
                target.write_bytes(answer.read())
        with KnowledgeAgentCore(Path(temp) / "files") as core:
            seconds, files = timed(lambda: core.collect_knowledge(folder))
            row("files + index", seconds, files.processed, files.bytes_processed)
        stop = stop_latency(server)

    print(f"\n== {len(urls)} pages of squad-long text on 127.0.0.1, {chunks} chunks indexed")
    print(f"{'system':<22} {'s':>7} {'pages':>6} {'MB':>6} {'pages/s':>8} {'MB/s':>6}")
    for entry in rows:
        print(
            f"{entry['system']:<22} {entry['seconds']:>7.2f} {entry['pages']:>6} "
            f"{entry['mb']:>6.2f} {entry['pages_per_s']:>8.1f} {entry['mb_per_s']:>6.2f}"
        )
    print(f"stop() to the end of the crawl, a request hanging: {stop * 1000:.0f} ms")
    if args.json:
        figures = {"pages": len(urls), "rows": rows, "stop_ms": round(stop * 1000)}
        args.json.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
