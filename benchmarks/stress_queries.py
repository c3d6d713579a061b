"""Generated query strings through ``search``, in the API and through ``knowledge-agent search``.

The generator mixes the kinds of text a user or an agent can send: Whoosh query syntax
(``AND OR NOT ( ) " * ? ~ ^ : [ ] { }``, field prefixes, ranges, wildcards), NUL and other
control characters, lone surrogates, RTL text and bidi marks, CJK, emoji and combining marks,
empty and whitespace-only strings, very long strings (10-100 KB) and a few 1 MB ones, mixed
with planted tokens and ordinary words. Every API query cycles through the three modes and
three levels. The API queries run in a child process that logs each failure as it happens, so
a crash or a hang still leaves the count of what ran.
"""

from __future__ import annotations

import json
import os
import random
import time
import traceback
from collections import Counter
from pathlib import Path
from typing import Any

from benchmarks.stress_checks import CliRun, examples, log, run_child, run_cli
from benchmarks.stress_corpus import token, write_corpus

SYNTAX = [
    "AND",
    "OR",
    "NOT",
    "(",
    ")",
    '"',
    "*",
    "?",
    "~",
    "^",
    ":",
    "[",
    "]",
    "{",
    "}",
    "TO",
    "title:",
    "content:",
    "heading:",
    "path:",
    "-",
    "+",
    "\\",
    "/",
    "!",
    "&&",
    "||",
    "~2",
    "^3",
    "*:*",
    "?*",
    "[a TO z]",
    "{0 TO 9}",
    "'",
    "`",
    "$",
    "%",
    "#",
    "@",
    "=",
    "<",
    ">",
    "|",
    ";",
    ",",
    ".",
]
WORDS = [
    "deploy",
    "rollback",
    "cache",
    "retry",
    "password",
    "the",
    "a",
    "of",
    "is",
    "migration",
    "timeout",
    "error",
    "index",
    "search",
    "query",
    "whoosh",
]
CJK = ["如何重置密码", "数据库", "検索", "エラー", "한국어", "中文分词", "重置", "の", "测试"]
RTL = ["مرحبا بالعالم", "שלום עולם", "\u202eabc\u202c", "\u200fטקסט\u200e", "كلمة السر"]
ODD = [
    "\x00",
    "\x01",
    "\x1b[31m",
    "\t",
    "\n",
    "\r\n",
    "\u00a0",
    "\u200b",
    "\ufeff",
    "\ufffd",
    "\U0001f600",
    "e\u0301",
    "\u0300\u0301\u0302",
    "\U0010ffff",
    "\ud800",
    "\udfff",
    "\udcff",
    "\x7f",
    "\u2028",
    "\u3000",
    "ﬁ",
    "ǅ",
    "İ",
    "ß",
    "\uffff",
]
MODES = ("hybrid", "keyword", "semantic")
LEVELS = ("auto", "chunk", "item")


def _piece(rng: random.Random, tokens: list[str]) -> str:
    kind = rng.random()
    if kind < 0.3:
        return rng.choice(SYNTAX)
    if kind < 0.45:
        return rng.choice(WORDS)
    if kind < 0.55:
        return rng.choice(tokens)
    if kind < 0.65:
        return rng.choice(CJK)
    if kind < 0.72:
        return rng.choice(RTL)
    if kind < 0.85:
        return rng.choice(ODD)
    return "".join(chr(rng.randrange(0x20, 0x3000)) for _ in range(rng.randint(1, 6)))


def generate(count: int, seed: int, tokens: list[str], huge: int) -> list[tuple[str, str]]:
    """``count`` (kind, query) pairs, ``huge`` of them 1 MB long."""
    rng = random.Random(seed)
    fixed = [
        "",
        " ",
        "\t\n ",
        "\x00",
        "*",
        "?",
        '"',
        "(",
        ")",
        "AND",
        "NOT",
        "OR OR OR",
        "title:",
        ":",
        "[",
        "{}",
        "\\",
        "~",
        "^",
        "*:*",
        '"unclosed phrase',
        "a" * 5000,
        "\ud800",
        "\udfff\ud800",
        "\u202e",
        "重置密码",
        "x" * 100_000,
    ]
    queries = [("fixed", text) for text in fixed]
    for index in range(huge):
        unit = rng.choice(["a ", "重置", "tok ", "( ", "\u202e", "AND "])
        queries.append(("1MB", (unit * (1_000_000 // len(unit) + 1))[:1_000_000] + str(index)))
    while len(queries) < count:
        roll = rng.random()
        if roll < 0.9:
            text = " ".join(_piece(rng, tokens) for _ in range(rng.randint(1, 12)))
            queries.append(("mixed", text if rng.random() < 0.7 else text.replace(" ", "")))
        elif roll < 0.98:
            pieces = [_piece(rng, tokens) for _ in range(rng.randint(2000, 20_000))]
            queries.append(("long", " ".join(pieces)))
        else:
            queries.append(
                (
                    "whitespace",
                    "".join(
                        rng.choice(" \t\n\r\u00a0\u3000\u2028") for _ in range(rng.randint(1, 50))
                    ),
                )
            )
    return queries[:count]


def _safe(text: str, limit: int = 200) -> str:
    """A query as JSON-safe, short text for the details."""
    shown = text if len(text) <= limit else f"{text[:limit]}… ({len(text):,} chars)"
    return shown.encode("utf-8", "backslashreplace").decode("utf-8")


def api_queries(
    data_dir: str, queries: list[tuple[str, str]], log_path: str, budget_s: float
) -> dict[str, Any]:
    """In a child process: every query once, cycling modes and levels; failures are logged
    to ``log_path`` as they happen."""
    from knowledge_agent import KnowledgeAgentCore

    slowest: list[tuple[float, str, str]] = []
    done = 0
    deadline = time.monotonic() + budget_s
    with KnowledgeAgentCore(data_dir) as core, open(log_path, "a", encoding="utf-8") as out:
        for number, (kind, text) in enumerate(queries):
            if time.monotonic() > deadline:
                break
            mode, level = MODES[number % 3], LEVELS[(number // 3) % 3]
            started = time.perf_counter()
            try:
                results = core.search(
                    text, mode=mode, level=level, limit=1 + number % 20, context_window=number % 3
                )
                for result in results:
                    json.dumps(result.to_dict())  # plain types at the boundary
            except Exception as exc:
                out.write(
                    json.dumps(
                        {
                            "kind": kind,
                            "mode": mode,
                            "level": level,
                            "query": _safe(text),
                            "error": f"{type(exc).__name__}: {exc}"[:300],
                            "trace": traceback.format_exc()[-1500:],
                        }
                    )
                    + "\n"
                )
                out.flush()
            seconds = time.perf_counter() - started
            slowest = sorted([*slowest, (seconds, kind, _safe(text, 60))], reverse=True)[:5]
            done += 1
    return {
        "done": done,
        "slowest": [{"seconds": round(s, 3), "kind": k, "query": q} for s, k, q in slowest],
    }


def _argv_safe(text: str) -> bool:
    """Whether ``text`` can be one argv entry: no NUL, encodable, under the kernel's limit."""
    if "\x00" in text or len(text) > 100_000:
        return False
    try:
        os.fsencode(text)
    except UnicodeEncodeError:
        return False
    return True


def run_queries(
    work: Path, api_count: int, cli_count: int, seed: int, huge: int, budget_s: float
) -> dict[str, Any]:
    work.mkdir(parents=True, exist_ok=True)
    corpus = write_corpus(work / "files", 200, seed)
    data_dir = work / "kb"
    build = run_cli(
        ["--data-dir", str(data_dir), "add", str(corpus.root)], timeout=600, workdir=work
    )
    if build.returncode != 0:
        raise RuntimeError(f"building the base failed: {build.stderr_tail()}")
    tokens = [token(n) for n in range(len(corpus.paths))]
    queries = generate(api_count, seed, tokens, huge)
    log_path = work / "api-failures.jsonl"
    log(f"  {len(queries):,} queries through the API")
    answer = run_child(
        api_queries, str(data_dir), queries, str(log_path), budget_s, timeout=budget_s + 300
    )
    failures = (
        [json.loads(line) for line in log_path.read_text("utf-8").splitlines()]
        if (log_path.exists())
        else []
    )
    api = {
        "planned": len(queries),
        "done": answer.value["done"] if answer.ok else None,
        "child": answer.describe(),
        "exceptions": len(failures),
        "exception_kinds": dict(Counter(f["error"].split(":")[0] for f in failures)),
        "exception_examples": examples(failures),
        "slowest": answer.value["slowest"] if answer.ok else [],
        "kinds": dict(Counter(kind for kind, _ in queries)),
    }
    rng = random.Random(seed + 1)
    candidates = [
        (kind, text)
        for kind, text in generate(cli_count * 3, seed + 7, tokens, 0)
        if _argv_safe(text)
    ]
    chosen = candidates[:cli_count]
    log(f"  {len(chosen)} queries through knowledge-agent search")
    cli_failures = []
    for number, (kind, text) in enumerate(chosen):
        mode = MODES[number % 3]
        extra = ["--json"] if rng.random() < 0.5 else []
        run: CliRun = run_cli(
            ["--data-dir", str(data_dir), "search", "--mode", mode, *extra, "--", text],
            timeout=120,
            workdir=work,
        )
        if run.returncode != 0 or run.traceback:
            cli_failures.append(
                {
                    "kind": kind,
                    "mode": mode,
                    "query": _safe(text),
                    "exit": run.returncode,
                    "traceback": run.traceback,
                    "stderr": run.stderr_tail(4),
                }
            )
    cli = {
        "planned": cli_count,
        "done": len(chosen),
        "failures": len(cli_failures),
        "failure_examples": examples(cli_failures),
        "failure_exits": dict(Counter(str(f["exit"]) for f in cli_failures)),
    }
    return {"api": api, "cli": cli}
