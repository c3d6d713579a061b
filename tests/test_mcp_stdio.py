"""The MCP server as agents run it: `knowledge-agent serve` over stdio, and the optional extra."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any, TextIO

import pytest

TIMEOUT = 60  # seconds; the whole session normally takes two or three


def run_python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=TIMEOUT
    )


def test_importing_the_package_and_its_cli_does_not_import_mcp() -> None:
    done = run_python(
        "import sys, knowledge_agent, knowledge_agent.cli\n"
        "loaded = sorted(m for m in sys.modules if m == 'mcp' or m.startswith('mcp.'))\n"
        "assert not loaded, loaded\n"
    )
    assert done.returncode == 0, done.stderr


def test_the_server_package_without_mcp_says_which_extra_to_install() -> None:
    done = run_python(
        "import sys\n"
        "sys.modules['mcp'] = None  # as if the SDK were not installed\n"
        "try:\n"
        "    import knowledge_agent.server\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    assert done.stdout.strip() == (
        "the MCP server needs the [mcp] extra, which is not installed: "
        'pip install "knowledge-agent[mcp]" (or, in a checkout of knowledge_agent: '
        'pip install ".[mcp]")'
    )


def test_serve_over_stdio_end_to_end(tmp_path: Path) -> None:
    # Imported here: the two tests above must also run where the [mcp] extra is missing.
    pytest.importorskip("mcp.server.mcpserver")
    import anyio
    from mcp import Client, StdioServerParameters, stdio_client

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "deploy.md").write_text(
        "# Deploy guide\n\n## Rollback\n\nPoint the current symlink at the previous release "
        "and restart the service; migrations are not undone by a rollback.\n",
        encoding="utf-8",
    )
    (docs / "retry.py").write_text(
        'def retry_with_backoff(call, attempts=3):\n    """Retry a call with exponential '
        'backoff."""\n    return call()\n',
        encoding="utf-8",
    )
    (docs / "intro.md").write_text("Deploy runbooks and retry helpers.\n", encoding="utf-8")
    secret = tmp_path / "secret.md"
    secret.write_text("The vault code is 7391.\n", encoding="utf-8")
    command = ["-m", "knowledge_agent.cli", "--data-dir", str(tmp_path / "data"), "serve"]
    server = StdioServerParameters(
        command=sys.executable,
        # Any URL prefix: a url that is no web address must still read nothing.
        args=[*command, "--root", str(docs), "--allow-url", "http://127.0.0.1:9/"],
        cwd=tmp_path,  # no project file of the developer's is picked up
    )
    stray: list[Any] = []

    async def record_stray_output(message: Any) -> None:
        # A line on stdout that is not JSON-RPC reaches the client as an exception.
        if isinstance(message, Exception):
            stray.append(message)

    async def session(errlog: TextIO) -> dict[str, Any]:
        with anyio.fail_after(TIMEOUT):
            # mode="legacy": the initialize handshake that today's MCP clients perform.
            client = Client(
                stdio_client(server, errlog=errlog),
                message_handler=record_stray_output,
                mode="legacy",
            )
            async with client:
                seen: dict[str, Any] = {"info": client.server_info}
                seen["tools"] = {tool.name for tool in (await client.list_tools()).tools}
                seen["added"] = await client.call_tool(
                    "add_knowledge", {"kb": "d", "path": str(docs)}
                )
                seen["refused"] = await client.call_tool(
                    "add_knowledge", {"kb": "d", "path": "/etc"}
                )
                seen["not urls"] = [
                    await client.call_tool("add_knowledge", {"kb": "d", "url": url})
                    for url in (str(secret), "/etc/passwd", f"file://{secret}", "~/.bashrc")
                ]
                seen["secret"] = await client.call_tool(
                    "knowledge_text_search", {"knowledge_base": "d", "keyword": "vault"}
                )
                found = await client.call_tool("search_knowledge", {"query": "roll back a release"})
                seen["found"] = answer = json.loads(found.content[0].text)
                chunk_id = answer["results"][0]["matched_chunks"][0]["chunk_id"]
                seen["read"] = await client.call_tool("read_chunk", {"chunk_id": chunk_id})
                seen["code"] = await client.call_tool("search_code", {"query": "retry backoff"})
                # The three tools of seed 002.
                seen["list"] = await client.call_tool("knowledge_list", {})
                seen["grep"] = await client.call_tool(
                    "knowledge_text_search", {"knowledge_base": "d", "keyword": "symlink"}
                )
                seen["semantic"] = await client.call_tool(
                    "knowledge_semantic_search",
                    {"knowledge_base": "d", "query": "roll back a release", "top_k": 1},
                )
                return seen

    with (tmp_path / "stderr.log").open("w") as errlog:
        seen = anyio.run(session, errlog)

    assert stray == [], (tmp_path / "stderr.log").read_text()
    assert seen["info"] is not None and seen["info"].name == "knowledge-agent"
    assert {"search_knowledge", "read_chunk", "add_knowledge", "index_status"} <= seen["tools"]
    added = json.loads(seen["added"].content[0].text)
    assert added["processed"] == 3 and len(added["item_ids"]) == 2, added  # intro.md: no item
    assert seen["refused"].is_error and "outside the folders" in seen["refused"].content[0].text
    for refused in seen["not urls"]:
        assert refused.is_error and "url must be an http:// or https:// address" in (
            refused.content[0].text
        )
    assert json.loads(seen["secret"].content[0].text)["count"] == 0
    assert seen["found"]["results"][0]["path"] == str((docs / "deploy.md").resolve())
    assert "previous release" in json.loads(seen["read"].content[0].text)["chunk"]["content"]
    assert json.loads(seen["code"].content[0].text)["results"][0]["title"] == "retry.py"
    listed = json.loads(seen["list"].content[0].text)
    assert listed["items"][0]["name"] == "d"
    assert listed["items"][0]["intro"] == "Deploy runbooks and retry helpers."
    grep = json.loads(seen["grep"].content[0].text)
    assert grep["count"] == 1 and grep["items"][0]["line"] == 5
    assert grep["items"][0]["source"] == str((docs / "deploy.md").resolve())
    semantic = json.loads(seen["semantic"].content[0].text)
    assert semantic["ok"] is True and semantic["count"] == 1
    assert "previous release" in semantic["items"][0]["text"]
