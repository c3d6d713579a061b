"""Backends: where a knowledge base is stored and indexed, behind knowledge_agent.protocols."""
