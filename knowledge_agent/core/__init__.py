"""The KnowledgeAgentCore facade (imported on first use: it loads both search engines)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from knowledge_agent.core.knowledge_agent_core import KnowledgeAgentCore

__all__ = ["KnowledgeAgentCore"]


def __getattr__(name: str) -> Any:
    if name == "KnowledgeAgentCore":
        from knowledge_agent.core.knowledge_agent_core import KnowledgeAgentCore

        return KnowledgeAgentCore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
