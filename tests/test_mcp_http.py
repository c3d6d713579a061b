"""The MCP server over streamable HTTP: ``bind_http`` and ``serve --http``."""

from __future__ import annotations

import json
import os
import signal
import socket
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
from http_probe import status

pytest.importorskip("mcp.server.mcpserver")

import anyio
import httpx
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

import knowledge_agent.server as server_package
from knowledge_agent import KnowledgeAgentCore
from knowledge_agent.cli import cli
from knowledge_agent.crawl.policy import is_loopback
from knowledge_agent.errors import ConfigError
from knowledge_agent.server import bind_http
from knowledge_agent.server.http_guard import RequestGuard, server_names

TIMEOUT = 10  # seconds for a whole session; it normally takes well under one
TOKEN = "test-token-0123456789abcdef"

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


async def session(url: str, *, token: str | None = None, **options: Any) -> dict[str, Any]:
    """List the tools and search over HTTP (sending ``token`` if given); what the client saw."""
    with anyio.fail_after(TIMEOUT):
        headers = {"Authorization": f"Bearer {token}"} if token else None
        async with create_mcp_http_client(headers=headers) as http:
            transport = streamable_http_client(url, http_client=http)
            async with Client(transport, **options) as client:
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


def test_a_server_with_a_token_answers_only_requests_that_carry_it(data_dir: Path) -> None:
    server = bind_http(lambda: KnowledgeAgentCore(data_dir), host="127.0.0.1", port=0, token=TOKEN)
    serving = threading.Thread(target=server.serve, name="mcp-http-token-test")
    serving.start()
    bearer = f"Bearer {TOKEN}"
    try:
        statuses = {
            "no token": status(server.url),
            "wrong token": status(server.url, Authorization=f"Bearer {TOKEN[:-1]}x"),
            "token as basic": status(server.url, Authorization=f"Basic {TOKEN}"),
            "token": status(server.url, Authorization=bearer),
            "lower-case scheme": status(server.url, Authorization=f"bearer {TOKEN}"),
            # The token does not open the door to other sites' pages (DNS rebinding).
            "token, foreign origin": status(
                server.url, Authorization=bearer, Origin="http://attacker.example"
            ),
            "token, foreign host": status(
                server.url, Authorization=bearer, Host=f"attacker.example:{server.port}"
            ),
            "token, own origin": status(
                server.url, Authorization=bearer, Origin=f"http://localhost:{server.port}"
            ),
        }
        seen = anyio.run(lambda: session(server.url, token=TOKEN))
    finally:
        server.stop()
        serving.join(TIMEOUT)

    assert statuses == {
        "no token": 401,
        "wrong token": 401,
        "token as basic": 401,
        "token": 200,
        "lower-case scheme": 200,
        "token, foreign origin": 403,
        "token, foreign host": 421,
        "token, own origin": 200,
    }
    assert_answered(seen)


def test_over_http_a_url_that_is_no_web_address_reads_nothing(
    data_dir: Path, tmp_path: Path
) -> None:
    root = tmp_path / "root"
    root.mkdir()
    secret = tmp_path / "secret.md"
    secret.write_text("The vault code is 7391.\n", encoding="utf-8")
    server = bind_http(
        lambda: KnowledgeAgentCore(data_dir),
        host="127.0.0.1",
        port=0,
        roots=[root],
        allow_urls=["http://"],  # any public http URL
    )

    async def attempt() -> tuple[list[Any], dict[str, Any]]:
        with anyio.fail_after(TIMEOUT):
            async with Client(server.url) as client:
                refused = [
                    await client.call_tool("add_knowledge", {"kb": "ops", "url": url})
                    for url in (str(secret), "/etc/passwd", f"file://{secret}", str(root))
                ]
                grep = await client.call_tool(
                    "knowledge_text_search", {"knowledge_base": "ops", "keyword": "vault"}
                )
                return refused, json.loads(grep.content[0].text)

    serving = threading.Thread(target=server.serve, name="mcp-http-url-test")
    serving.start()
    try:
        refused, grep = anyio.run(attempt)
    finally:
        server.stop()
        serving.join(TIMEOUT)

    assert all(result.is_error for result in refused)
    assert all("url must be an http:// or https:// address" in r.content[0].text for r in refused)
    assert grep["count"] == 0
    with KnowledgeAgentCore(data_dir) as core:
        assert core.status().items == 1  # the deploy guide the fixture added, nothing else


def test_a_server_stopped_before_it_serves_returns_at_once(data_dir: Path) -> None:
    server = bind_http(lambda: KnowledgeAgentCore(data_dir), host="127.0.0.1", port=0)
    server.stop()
    serving = threading.Thread(target=server.serve)
    serving.start()
    serving.join(TIMEOUT)
    assert not serving.is_alive()


def test_a_remote_host_needs_allow_remote_and_a_token(data_dir: Path, tmp_path: Path) -> None:
    opener: Callable[[], KnowledgeAgentCore] = lambda: KnowledgeAgentCore(data_dir)  # noqa: E731

    with pytest.raises(ConfigError, match="not a loopback address"):
        bind_http(opener, host="0.0.0.0", port=0)
    with pytest.raises(ConfigError, match="needs a bearer token"):
        bind_http(opener, host="0.0.0.0", port=0, allow_remote=True)
    with pytest.raises(ConfigError, match="at least 16 visible ASCII characters"):
        bind_http(opener, host="0.0.0.0", port=0, allow_remote=True, token="short")
    with pytest.raises(ConfigError, match="at least 16 visible ASCII characters"):
        bind_http(opener, port=0, token="sixteen chars with spaces")
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
        "token": None,  # loopback: no token unless --token-env asks for one
        "text_content": True,
        "data_dir": data_dir,
        "served": True,
    }
    assert (calls[1]["host"], calls[1]["port"], calls[1]["allow_remote"]) == ("0.0.0.0", 0, True)
    assert calls[1]["text_content"] is False
    assert (calls[2]["host"], calls[2]["port"], calls[2]["token"]) == ("::1", 9000, None)
    # A server reachable from other machines gets a made-up token, shown once on stderr
    # beside a warning, never on stdout.
    token = calls[1]["token"]
    assert isinstance(token, str) and len(token) >= 32
    assert remote.stdout == "" and remote.stderr.count(token) == 1
    assert "0.0.0.0 is reachable from other machines" in remote.stderr
    assert token not in local.stderr + ipv6.stderr


def test_serve_token_env_reads_the_token_from_the_named_variable(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[dict[str, Any]] = []

    class FakeServer:
        url = "http://127.0.0.1:8765/mcp"

        def serve(self) -> None:
            pass

    def fake_bind_http(open_core: Callable[[], KnowledgeAgentCore], **options: Any) -> Any:
        calls.append(options)
        return FakeServer()

    monkeypatch.setattr(server_package, "bind_http", fake_bind_http)
    monkeypatch.setenv("KA_TEST_TOKEN", TOKEN)
    monkeypatch.setenv("KA_EMPTY_TOKEN", "")
    monkeypatch.delenv("KA_MISSING_TOKEN", raising=False)
    monkeypatch.setenv("KA_SHORT_TOKEN", "s3cr3t-x")
    given = invoke(
        data_dir, "--http", "0.0.0.0:0", "--allow-remote", "--token-env", "KA_TEST_TOKEN"
    )
    loopback = invoke(data_dir, "--http", "0", "--token-env", "KA_TEST_TOKEN")
    empty = invoke(data_dir, "--http", "0", "--token-env", "KA_EMPTY_TOKEN")
    missing = invoke(data_dir, "--http", "0", "--token-env", "KA_MISSING_TOKEN")
    short = invoke(data_dir, "--http", "0", "--token-env", "KA_SHORT_TOKEN")
    without_http = invoke(data_dir, "--token-env", "KA_TEST_TOKEN")

    assert given.exit_code == 0 and loopback.exit_code == 0, given.output
    assert [call["token"] for call in calls] == [TOKEN, TOKEN]
    # The user's own token is never echoed.
    assert TOKEN not in given.stdout + given.stderr + loopback.stdout + loopback.stderr
    assert "reachable from other machines" in given.stderr
    assert "reachable from other machines" not in loopback.stderr
    for result, name in ((empty, "KA_EMPTY_TOKEN"), (missing, "KA_MISSING_TOKEN")):
        assert result.exit_code == 1 and result.stdout == ""
        assert result.stderr == (
            f"Error: ${name} (--token-env) is empty or not set: it must hold the server's "
            "bearer token\n"
        )
    assert short.exit_code == 1 and short.stderr.startswith(
        "Error: $KA_SHORT_TOKEN (--token-env) must be a bearer token of at least 16 visible"
    )
    assert "s3cr3t-x" not in short.stderr  # the token is not shown
    assert without_http.exit_code == 2
    assert "--token-env applies only with --http" in without_http.stderr
    assert len(calls) == 2  # no server was bound for the failed runs


def ctrl_c_as_in_a_terminal() -> None:
    """In the server's process before it starts: Ctrl-C's default action, even when the
    suite runs in a shell's background job (where SIGINT is ignored, and stays ignored
    across exec)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.skipif(os.name == "nt", reason="SIGINT to a child process is POSIX-only here")
def test_serve_http_end_to_end_until_ctrl_c(data_dir: Path, tmp_path: Path) -> None:
    command = [sys.executable, "-m", "knowledge_agent.cli", "--data-dir", str(data_dir)]
    process = subprocess.Popen(
        [*command, "serve", "--http", "127.0.0.1:0"],
        cwd=tmp_path,  # no project file of the developer's is picked up
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=ctrl_c_as_in_a_terminal,
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


@pytest.mark.skipif(os.name == "nt", reason="SIGINT to a child process is POSIX-only here")
def test_serve_http_with_a_token_end_to_end(data_dir: Path, tmp_path: Path) -> None:
    command = [sys.executable, "-m", "knowledge_agent.cli", "--data-dir", str(data_dir)]
    process = subprocess.Popen(
        [*command, "serve", "--http", "127.0.0.1:0", "--token-env", "KA_TEST_TOKEN"],
        cwd=tmp_path,
        env={**os.environ, "KA_TEST_TOKEN": TOKEN},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=ctrl_c_as_in_a_terminal,
    )
    try:
        assert process.stderr is not None
        line = process.stderr.readline()
        assert " at http://127.0.0.1:" in line, line
        url = line.split(" at ", 1)[1].split(";", 1)[0]
        refused = status(url)
        wrong = status(url, Authorization="Bearer wrong-token-0123456789")
        seen = anyio.run(lambda: session(url, token=TOKEN, mode="legacy"))
        process.send_signal(signal.SIGINT)
        stdout, stderr = process.communicate(timeout=TIMEOUT)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()

    assert (refused, wrong) == (401, 401)
    assert_answered(seen)
    assert process.returncode == 130, stderr
    assert stdout == "" and TOKEN not in line + stderr


# -- the request guard, at addresses a test cannot bind ------------------------------------


def guarded_statuses(host: str, requests: dict[str, dict[str, str]]) -> tuple[dict[str, int], int]:
    """The status of each request (extra headers by name) to a guarded app bound to
    ``host``, arriving at 192.0.2.10:8765; and how many the app itself answered."""
    answered: list[str] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        answered.append(scope["path"])
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    guard = RequestGuard(app, names=server_names(host), token=TOKEN)

    async def send_all() -> dict[str, int]:
        transport = httpx.ASGITransport(app=guard)
        async with httpx.AsyncClient(transport=transport) as client:
            return {
                name: (await client.post("http://192.0.2.10:8765/mcp", headers=headers)).status_code
                for name, headers in requests.items()
            }

    return anyio.run(send_all), len(answered)


def test_a_server_open_to_the_network_checks_host_origin_and_token() -> None:
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    requests = {
        "its address": bearer,
        "no token": {},
        "wrong token": {"Authorization": "Bearer " + "x" * len(TOKEN)},
        "this machine's name": {**bearer, "Host": f"{socket.gethostname()}:8765"},
        "localhost": {**bearer, "Host": "localhost:8765"},
        "another host": {**bearer, "Host": "attacker.example:8765"},
        "malformed host": {**bearer, "Host": "192.0.2.10:http"},
        "its own origin": {**bearer, "Origin": "http://192.0.2.10:8765"},
        "another origin": {**bearer, "Origin": "http://attacker.example"},
        "a null origin": {**bearer, "Origin": "null"},
    }

    wildcard, answered = guarded_statuses("0.0.0.0", requests)
    one_address, _ = guarded_statuses("192.0.2.10", requests)

    assert wildcard == {
        "its address": 200,
        "no token": 401,
        "wrong token": 401,
        "this machine's name": 200,
        "localhost": 200,
        "another host": 421,
        "malformed host": 421,
        "its own origin": 200,
        "another origin": 403,
        "a null origin": 403,
    }
    assert answered == 4  # the app never saw a refused request
    # Bound to one address, the server cannot be reached through loopback: no client sends
    # "localhost" to it.
    assert one_address["its address"] == one_address["this machine's name"] == 200
    assert one_address["localhost"] == 421
