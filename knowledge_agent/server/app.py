"""The MCP server: ``create_server(core)`` builds it; ``run_stdio(open_core)`` serves it over
stdio and ``bind_http(open_core, host=, port=)`` binds it for streamable HTTP: the bound
server's URL, ``serve()`` and ``stop()``; every HTTP request passes the checks of
:mod:`.http_guard` (its Host and Origin, and the bearer token when the server has one).

Each plain function of :mod:`knowledge_agent.server.mcp_tools` becomes one tool: its
signature (without ``core`` and ``roots``) is the input schema, its docstring the
description. An argument the schema does not name is an error that names it and lists the
valid ones (the SDK would drop it silently: an agent's misspelt ``max_item`` must not quietly
become the default). The core is owned by the server's lifespan when the server is given a
way to open one; tools reach it through the request context, never through a global.
"""

from __future__ import annotations

import functools
import inspect
import logging
import os
import socket
import threading
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from importlib import metadata
from typing import Any

import anyio
import anyio.to_thread
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.tools import Tool
from mcp.server.transport_security import TransportSecuritySettings
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, ConfigDict, create_model, model_validator
from pydantic_core import PydanticCustomError

from knowledge_agent.core import KnowledgeAgentCore
from knowledge_agent.crawl import UrlPolicy
from knowledge_agent.crawl.policy import is_loopback
from knowledge_agent.errors import ConfigError, KnowledgeAgentError
from knowledge_agent.server import mcp_tools
from knowledge_agent.server.http_guard import RequestGuard, check_token, server_names
from knowledge_agent.server.schemas import output_schema

__all__ = [
    "HttpServer",
    "ServerState",
    "bind_http",
    "create_server",
    "run_stdio",
]

logger = logging.getLogger(__name__)

INSTRUCTIONS = """\
An offline knowledge base of documents and code, searched by passage.
Call knowledge_list first: it names the knowledge bases with an intro saying what each is
about. Then, in the knowledge base that fits, knowledge_semantic_search finds the passages
that answer a question and knowledge_text_search finds exact text line by line, like grep.
search_knowledge (or search_code / search_docs for only code or only documents) searches
every knowledge base at once, with context; every matched chunk has an evidence ref
kb:<chunk_id>:<path>#L<start>-L<end> to cite. read_chunk shows a passage with its
neighbours, get_knowledge_item a whole document. list_items pages through the stored
documents (by knowledge base, path glob or source type) without their text.
"""

_READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False)
_WRITING = {
    "add_knowledge": ToolAnnotations(
        read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False
    ),
    "delete_knowledge": ToolAnnotations(
        read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False
    ),
}
# Filled in by the server, not by the agent (see _as_tool).
_INJECTED = ("core", "roots", "url_policy")


@dataclass(frozen=True)
class ServerState:
    """What the lifespan hands to every tool call: the open core, the folders and the URLs
    it may collect from."""

    core: KnowledgeAgentCore
    roots: tuple[str, ...]
    url_policy: UrlPolicy | None = None


CoreSource = KnowledgeAgentCore | Callable[[], KnowledgeAgentCore]


def _lifespan(
    source: CoreSource, roots: tuple[str, ...], url_policy: UrlPolicy | None
) -> Callable[[MCPServer[ServerState]], AbstractAsyncContextManager[ServerState]]:
    """Open the core at startup and close it at shutdown — unless it was handed over open."""

    @asynccontextmanager
    async def lifespan(_server: MCPServer[ServerState]) -> AsyncIterator[ServerState]:
        if isinstance(source, KnowledgeAgentCore):
            yield ServerState(source, roots, url_policy)
            return
        # Opening may rebuild an index: keep the event loop free meanwhile.
        core = await anyio.to_thread.run_sync(source)
        try:
            yield ServerState(core, roots, url_policy)
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(core.close)

    return lifespan


def _result(payload: dict[str, Any], text_content: bool) -> CallToolResult:
    """The answer as structured content and, for clients that read only text, as compact
    JSON text too (what the budget measured)."""
    text = [TextContent(type="text", text=mcp_tools.dumps(payload))] if text_content else []
    return CallToolResult(content=text, structured_content=payload)


def _as_tool(function: Callable[..., dict[str, Any]], text_content: bool) -> Callable[..., Any]:
    """An async MCP tool over ``function(core, …)``, with the same agent-facing parameters.

    The SDK derives the input schema from the signature, so the wrapper carries the
    function's own signature minus the injected ``core`` / ``roots``, plus the context the
    SDK fills in. The call runs on a worker thread: core calls block (the core is locked).
    """
    signature = inspect.signature(function, eval_str=True)
    visible = [p for p in signature.parameters.values() if p.name not in _INJECTED]
    injected = [name for name in signature.parameters if name in _INJECTED]

    async def tool(ctx: Context[ServerState, Any], **arguments: Any) -> CallToolResult:
        state: ServerState = ctx.request_context.lifespan_context
        values = {name: getattr(state, name) for name in injected}
        call = functools.partial(function, **values, **arguments)
        try:
            return _result(await anyio.to_thread.run_sync(call), text_content)
        except KnowledgeAgentError as exc:
            # An anticipated failure: its message goes back to the agent as a tool error,
            # never an empty one.
            raise ToolError(str(exc) or type(exc).__name__) from exc

    context = inspect.Parameter("ctx", inspect.Parameter.KEYWORD_ONLY, annotation=Context)
    tool.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=[*visible, context], return_annotation=CallToolResult
    )
    tool.__annotations__ = {
        **{p.name: p.annotation for p in visible},
        "ctx": Context,
        "return": CallToolResult,
    }
    tool.__name__ = tool.__qualname__ = function.__name__
    # The description a model reads: the docstring without its source indentation.
    tool.__doc__ = inspect.cleandoc(function.__doc__ or "")
    return tool


class _KnownArgumentsOnly(BaseModel):
    """Mixed into a tool's argument model: an argument the tool does not take is an error
    naming it and the valid ones (pydantic's default is to drop it without a word)."""

    model_config = ConfigDict(extra="forbid")  # also says so in the schema

    @model_validator(mode="before")
    @classmethod
    def known_arguments_only(cls, data: Any) -> Any:
        if isinstance(data, dict):
            valid = [field.alias or name for name, field in cls.model_fields.items()]
            unknown = [key for key in data if key not in valid]
            if unknown:
                raise PydanticCustomError(
                    "unknown_argument",
                    "unknown argument {unknown}; the valid arguments are: {valid}",
                    {
                        "unknown": ", ".join(repr(key) for key in unknown),
                        "valid": ", ".join(valid) or "none",
                    },
                )
        return data


def _strict(tool: Tool) -> Tool:
    """``tool`` with an argument model (and input schema) that refuses unknown arguments,
    and the output schema of its answer.

    The SDK derives the model from the signature with no say over its configuration, so
    the model is replaced by a subclass of it; everything else about the tool stays. The
    output schema is published, not enforced here: a client that reads structured content
    checks it.
    """
    loose = tool.fn_metadata.arg_model
    strict = create_model(loose.__name__, __base__=(loose, _KnownArgumentsOnly))
    metadata = tool.fn_metadata.model_copy(
        update={"arg_model": strict, "output_schema": output_schema(tool.name)}
    )
    return tool.model_copy(
        update={"fn_metadata": metadata, "parameters": strict.model_json_schema(by_alias=True)}
    )


def _version() -> str:
    try:
        return metadata.version("knowledge-agent")
    except metadata.PackageNotFoundError:
        return "0"


def create_server(
    core: CoreSource,
    *,
    roots: Sequence[str | os.PathLike[str]] = (),
    allow_urls: Sequence[str] = (),
    text_content: bool = True,
) -> MCPServer[ServerState]:
    """An MCP server exposing ``core`` through the tools of :mod:`.mcp_tools`.

    ``core`` is an open core (used as is, never closed here) or a callable that opens one:
    then the server's lifespan opens it at startup and closes it at shutdown. ``roots`` are
    the folders ``add_knowledge`` may read files from; without any, it accepts text only.
    ``allow_urls`` are the URL prefixes it may crawl (none: no web pages at all); a host on
    a private, loopback or link-local address only when a prefix names that host. Every
    answer is structured content, checked by its tool's output schema; ``text_content``
    also sends it as JSON text, which the MCP specification asks for the clients that read
    only text (``False`` halves the bytes for clients that read structured content).
    ``ConfigError`` if a root is not a folder.
    """
    if not isinstance(core, KnowledgeAgentCore) and not callable(core):
        raise TypeError(f"core must be a KnowledgeAgentCore or a callable, got {core!r}")
    allowed = mcp_tools.resolve_roots(roots)
    tools = [
        _strict(
            Tool.from_function(
                _as_tool(function, text_content),
                name=function.__name__,
                annotations=_WRITING.get(function.__name__, _READ_ONLY),
            )
        )
        for function in mcp_tools.TOOLS
    ]
    return MCPServer(
        "knowledge-agent",
        title="Knowledge Agent",
        instructions=INSTRUCTIONS,
        version=_version(),
        # The SDK sets up root logging at this level (on stderr): its per-request INFO
        # lines would drown the command's own messages.
        log_level="WARNING",
        lifespan=_lifespan(core, allowed, UrlPolicy(tuple(allow_urls)) if allow_urls else None),
        tools=tools,
    )


def run_stdio(
    open_core: Callable[[], KnowledgeAgentCore],
    *,
    roots: Sequence[str | os.PathLike[str]] = (),
    allow_urls: Sequence[str] = (),
    text_content: bool = True,
) -> None:
    """Serve over stdin/stdout until the client disconnects (blocking).

    The core is opened once the server starts and closed when it stops. Logs go to stderr;
    stdout carries the protocol only.
    """
    server = create_server(open_core, roots=roots, allow_urls=allow_urls, text_content=text_content)
    logger.info(
        "serving the knowledge base over stdio (roots: %s; URLs: %s)",
        list(roots) or "none",
        list(allow_urls) or "none",
    )
    anyio.run(server.run_stdio_async)


# -- streamable HTTP --------------------------------------------------------------------------

HTTP_PATH = "/mcp"
# Agents keep a stream open per session: past this, a stopping server closes them anyway.
_GRACEFUL_SHUTDOWN_S = 3


def _bind(host: str, port: int) -> socket.socket:
    """A TCP socket listening on ``host:port`` (port 0: a free one): a client that connects
    before the server answers waits in the backlog instead of being refused."""
    family, kind, proto, _, address = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    sock = socket.socket(family, kind, proto)
    try:
        if os.name != "nt":  # on Windows SO_REUSEADDR would let two servers share the port
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    return sock


class HttpServer:
    """The MCP server over streamable HTTP, bound to its port: ``url`` is known (even for
    port 0) before ``serve()`` starts answering.

    ``serve()`` blocks until ``stop()`` (from any thread), or Ctrl-C / SIGTERM when it runs
    in the main thread. It opens the core first and closes it once the server has stopped.
    """

    def __init__(
        self,
        open_core: Callable[[], KnowledgeAgentCore],
        sock: socket.socket,
        *,
        host: str,
        roots: tuple[str, ...],
        allow_urls: tuple[str, ...],
        token: str | None = None,
        text_content: bool = True,
    ) -> None:
        self._open_core = open_core
        self._text_content = text_content
        self._socket = sock
        self._host = host
        self._token = token
        self._roots = roots
        self._allow_urls = allow_urls
        self._lock = threading.Lock()
        self._stopping = False
        self._uvicorn: Any = None
        bound_host, self.port = sock.getsockname()[:2]
        shown = f"[{bound_host}]" if ":" in bound_host else bound_host
        self.url = f"http://{shown}:{self.port}{HTTP_PATH}"

    def serve(self) -> None:
        """Answer requests until stopped (blocking); the socket is closed afterwards."""
        import uvicorn

        try:
            core = self._open_core()
            # Handed to the lifespan "to open": it returns this core and closes it when the
            # app shuts down, before uvicorn re-raises a SIGTERM that would end the process.
            server = create_server(
                lambda: core,
                roots=self._roots,
                allow_urls=self._allow_urls,
                text_content=self._text_content,
            )
            try:
                app = server.streamable_http_app(
                    streamable_http_path=HTTP_PATH,
                    # The Host and Origin checks are the guard's, for every address (the
                    # SDK's know loopback only); the SDK still checks the content type.
                    transport_security=TransportSecuritySettings(
                        enable_dns_rebinding_protection=False
                    ),
                    host=self._host,
                )
                guarded = RequestGuard(app, names=server_names(self._host), token=self._token)
                config = uvicorn.Config(
                    guarded,
                    lifespan="on",
                    log_config=None,  # the application's logging stays as configured
                    log_level="warning",
                    access_log=False,
                    timeout_graceful_shutdown=_GRACEFUL_SHUTDOWN_S,
                )
                with self._lock:
                    self._uvicorn = uvicorn.Server(config)
                    self._uvicorn.should_exit = self._stopping
                logger.info("serving the knowledge base at %s", self.url)
                self._uvicorn.run(sockets=[self._socket])
            finally:
                core.close()
        finally:
            self._socket.close()

    def stop(self) -> None:
        """Ask the server to stop: open requests get a few seconds to finish."""
        with self._lock:
            self._stopping = True
            if self._uvicorn is not None:
                self._uvicorn.should_exit = True


def bind_http(
    open_core: Callable[[], KnowledgeAgentCore],
    *,
    host: str = "127.0.0.1",
    port: int = 8765,
    roots: Sequence[str | os.PathLike[str]] = (),
    allow_urls: Sequence[str] = (),
    allow_remote: bool = False,
    token: str | None = None,
    text_content: bool = True,
) -> HttpServer:
    """Bind the streamable-HTTP server to ``host:port`` (port 0: any free port).

    With a ``token`` every request must carry ``Authorization: Bearer <token>`` (else
    401). A host that is not loopback makes the server reachable from other machines: it
    needs ``allow_remote`` and a token. ``ConfigError`` for those, for a token too short
    to be safe and for a root that is not a folder; ``OSError`` when the port cannot be
    bound.
    """
    if not is_loopback(host):
        if not allow_remote:
            raise ConfigError(
                f"refusing to serve on {host}: it is not a loopback address, so other "
                "machines could reach the server; allow remote clients explicitly to serve there"
            )
        if token is None:
            raise ConfigError(
                f"serving on {host}, reachable from other machines, needs a bearer token "
                "that every client must send"
            )
    if token is not None:
        check_token(token, "token")
    roots = mcp_tools.resolve_roots(roots)  # a bad root fails before the port is taken
    sock = _bind(host.strip("[]"), port)
    return HttpServer(
        open_core,
        sock,
        host=host,
        roots=roots,
        allow_urls=tuple(allow_urls),
        token=token,
        text_content=text_content,
    )
