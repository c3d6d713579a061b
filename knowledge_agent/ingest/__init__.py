"""Turning folders and files into items: walking, collecting, watching."""

from knowledge_agent.ingest.report import CollectProgress, CollectReport, FileIssue
from knowledge_agent.ingest.walker import WalkOptions

__all__ = ["CollectProgress", "CollectReport", "FileIssue", "WalkOptions"]
