"""One MCP ``initialize`` POST and the HTTP status it gets (no tests of its own): what the
HTTP tests and the stress benchmark ask a server to see whether it lets a request in."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

__all__ = ["INITIALIZE", "status"]

INITIALIZE = json.dumps(
    {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "test", "version": "1"},
        },
    }
).encode()


def status(url: str, *, timeout: float = 10, **headers: str) -> int:
    """The HTTP status of an MCP initialize request with these extra headers (-1: no answer)."""
    request = urllib.request.Request(
        url,
        data=INITIALIZE,
        method="POST",
        headers={
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            **headers,
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return int(response.status)
    except urllib.error.HTTPError as refused:
        refused.close()
        return refused.code
    except OSError:
        return -1
