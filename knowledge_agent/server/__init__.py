"""The MCP server over a knowledge base (the optional ``[mcp]`` extra).

``create_server(core)`` builds the server, ``run_stdio(open_core)`` serves it over stdio and
``bind_http(open_core, host=, port=).serve()`` over streamable HTTP;
the tools themselves are plain functions in :mod:`knowledge_agent.server.mcp_tools`.
"""

from knowledge_agent.extras import missing_extra

try:
    import mcp.server.mcpserver  # noqa: F401  (the SDK 2.x server API this package needs)
except ImportError as exc:
    raise ImportError(missing_extra("the MCP server", "mcp")) from exc

from knowledge_agent.server.app import (
    HttpServer,
    ServerState,
    bind_http,
    create_server,
    run_stdio,
)

__all__ = ["HttpServer", "ServerState", "bind_http", "create_server", "run_stdio"]
