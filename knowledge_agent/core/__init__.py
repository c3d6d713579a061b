"""The KnowledgeAgentCore facade."""

from knowledge_agent.core.knowledge_agent_core import KnowledgeAgentCore

__all__ = ["KnowledgeAgentCore"]
