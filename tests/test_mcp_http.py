"""The MCP server over streamable HTTP: ``bind_http`` and ``serve --http``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

pytest.importorskip("mcp.server.mcpserver")

import anyio
from mcp import Client

import knowledge_agent.server as server_package
from knowledge_agent import KnowledgeAgentCore
from knowledge_agent.cli import cli
from knowledge_agent.crawl.policy import is_loopback
from knowledge_agent.errors import ConfigError
from knowledge_agent.server import bind_http

TIMEOUT = 10  # seconds for a whole session; it normally takes well under one

ROLLBACK = (
    "# Deploy guide\n\n## Rollback\n\nPoint the current symlink at the previous release and "
    "restart the service; migrations are not undone by a rollback.\n"
)


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    data = tmp_path / "data"
    with KnowledgeAgentCore(data) as core:
        core.add_text(ROLLBACK, title="Deploy guide", kb="ops")
    return data


def invoke(data_dir: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, ["--data-dir", str(data_dir), "serve", *args])


async def session(url: str, **options: Any) -> dict[str, Any]:
    """List the tools and search over HTTP; what the client saw."""
    with anyio.fail_after(TIMEOUT):
        async with Client(url, **options) as client:
            tools = {tool.name for tool in (await client.list_tools()).tools}
            found = await client.call_tool("search_knowledge", {"query": "roll back a release"})
            listed = await client.call_tool("list_items", {"kb": "ops"})
            return {
                "tools": tools,
                "found": json.loads(found.content[0].text),
                "listed": json.loads(listed.content[0].text),
            }


def assert_answered(seen: dict[str, Any]) -> None:
    assert {"search_knowledge", "list_items", "read_chunk", "add_knowledge"} <= seen["tools"]
    top = seen["found"]["results"][0]
    assert top["title"] == "Deploy guide" and top["kb"] == "ops"
    assert "previous release" in top["matched_chunks"][0]["content"]
    assert [item["title"] for item in seen["listed"]["items"]] == ["Deploy guide"]


def test_streamable_http_serves_the_tools_and_stops_cleanly(data_dir: Path) -> None:
    threads_before = set(threading.enumerate())
    closed: list[KnowledgeAgentCore] = []

    def open_core() -> KnowledgeAgentCore:
        core = KnowledgeAgentCore(data_dir)
        close = core.close

        def recording_close() -> None:
            closed.append(core)
            close()

        core.close = recording_close  # type: ignore[method-assign]
        return core

    server = bind_http(open_core, host="127.0.0.1", port=0)
    assert server.url == f"http://127.0.0.1:{server.port}/mcp" and server.port > 0
    serving = threading.Thread(target=server.serve, name="mcp-http-test")
    serving.start()
    try:
        # Both handshakes: today's clients (initialize) and the SDK's default.
        legacy = anyio.run(lambda: session(server.url, mode="legacy"))
        default = anyio.run(lambda: session(server.url))
        # A page on another site that resolves its own name to 127.0.0.1 (DNS rebinding)
        # sends its own Host header: refused.
        rebound = urllib.request.Request(
            server.url,
            data=b"{}",
            method="POST",
            headers={
                "Host": f"attacker.example:{server.port}",
                "Content-Type": "application/json",
                "Accept": "application/json, text/event-stream",
            },
        )
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(rebound, timeout=TIMEOUT)
        refused.value.close()
    finally:
        server.stop()
        serving.join(TIMEOUT)

    assert not serving.is_alive()
    assert refused.value.code == 421  # Invalid Host header
    assert_answered(legacy)
    assert_answered(default)
    assert len(closed) >= 1  # the core was closed once the server stopped
    # AnyIO's worker threads are told to stop when their event loop's main task ends and
    # leave a moment later: give them that moment, no more.
    for thread in set(threading.enumerate()) - threads_before:
        thread.join(2)
    assert [t for t in set(threading.enumerate()) - threads_before if t.is_alive()] == []


def test_a_server_stopped_before_it_serves_returns_at_once(data_dir: Path) -> None:
    server = bind_http(lambda: KnowledgeAgentCore(data_dir), host="127.0.0.1", port=0)
    server.stop()
    serving = threading.Thread(target=server.serve)
    serving.start()
    serving.join(TIMEOUT)
    assert not serving.is_alive()


def test_a_remote_host_needs_allow_remote(data_dir: Path, tmp_path: Path) -> None:
    opener: Callable[[], KnowledgeAgentCore] = lambda: KnowledgeAgentCore(data_dir)  # noqa: E731

    with pytest.raises(ConfigError, match="not a loopback address"):
        bind_http(opener, host="0.0.0.0", port=0)
    with pytest.raises(ConfigError, match="is not a folder"):
        bind_http(opener, port=0, roots=[tmp_path / "missing"])
    assert [is_loopback(h) for h in ("127.0.0.1", "localhost", "::1", "[::1]", "127.8.0.1")] == [
        True
    ] * 5
    assert [is_loopback(h) for h in ("0.0.0.0", "::", "192.168.1.2", "example.com")] == [False] * 4


# -- the command line ------------------------------------------------------------------------


def test_serve_http_refuses_a_remote_host_without_allow_remote(data_dir: Path) -> None:
    result = invoke(data_dir, "--http", "0.0.0.0:8765")

    assert result.exit_code == 2, result.output
    assert "0.0.0.0 is not a loopback address" in result.stderr
    assert "--allow-remote" in result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--http", "localhost:http"], "is not [HOST:]PORT"),
        (["--http", "70000"], "is not [HOST:]PORT"),
        (["--allow-remote"], "--allow-remote applies only with --http"),
    ],
)
def test_serve_http_checks_its_options(data_dir: Path, args: list[str], message: str) -> None:
    result = invoke(data_dir, *args)

    assert result.exit_code == 2 and message in result.stderr


def test_serve_http_hands_the_address_roots_and_url_prefixes_to_the_server(
    data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[dict[str, Any]] = []

    class FakeServer:
        url = "http://127.0.0.1:8765/mcp"

        def serve(self) -> None:
            calls[-1]["served"] = True

    def fake_bind_http(open_core: Callable[[], KnowledgeAgentCore], **options: Any) -> Any:
        with open_core() as core:
            options["data_dir"] = core.data_dir
        calls.append(options)
        return FakeServer()

    monkeypatch.setattr(server_package, "bind_http", fake_bind_http)
    local = invoke(
        data_dir, "--http", "8765", "--root", str(tmp_path), "--allow-url", "https://x.org/"
    )
    remote = invoke(data_dir, "--http", "0.0.0.0:0", "--allow-remote", "--structured-only")
    ipv6 = invoke(data_dir, "--http", "[::1]:9000")

    assert local.exit_code == 0 and remote.exit_code == 0 and ipv6.exit_code == 0, local.output
    assert "http://127.0.0.1:8765/mcp" in local.stderr and local.stdout == ""
    assert calls[0] == {
        "host": "127.0.0.1",
        "port": 8765,
        "roots": [tmp_path.resolve()],
        "allow_urls": ("https://x.org/",),
        "allow_remote": False,
        "text_content": True,
        "data_dir": data_dir,
        "served": True,
    }
    assert (calls[1]["host"], calls[1]["port"], calls[1]["allow_remote"]) == ("0.0.0.0", 0, True)
    assert calls[1]["text_content"] is False
    assert (calls[2]["host"], calls[2]["port"]) == ("::1", 9000)


@pytest.mark.skipif(os.name == "nt", reason="SIGINT to a child process is POSIX-only here")
def test_serve_http_end_to_end_until_ctrl_c(data_dir: Path, tmp_path: Path) -> None:
    command = [sys.executable, "-m", "knowledge_agent.cli", "--data-dir", str(data_dir)]
    process = subprocess.Popen(
        [*command, "serve", "--http", "127.0.0.1:0"],
        cwd=tmp_path,  # no project file of the developer's is picked up
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stderr is not None
        line = process.stderr.readline()  # "Serving MCP (streamable HTTP) at URL; …"
        assert " at http://127.0.0.1:" in line, line
        url = line.split(" at ", 1)[1].split(";", 1)[0]
        seen = anyio.run(lambda: session(url, mode="legacy"))
        process.send_signal(signal.SIGINT)
        stdout, stderr = process.communicate(timeout=TIMEOUT)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()

    assert_answered(seen)
    assert process.returncode == 130, stderr  # Ctrl-C: "interrupted", after a clean stop
    assert stdout == ""
