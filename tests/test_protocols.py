"""The seams of knowledge_agent.protocols: the local backend provides every member each
protocol names, with a signature that accepts every call the protocol allows."""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pytest

from knowledge_agent import KnowledgeAgentCore
from knowledge_agent.backends.local.dense.index import DenseIndex
from knowledge_agent.backends.local.keyword.index import SearchIndexManager
from knowledge_agent.backends.local.shared_indexes import SharedIndexes
from knowledge_agent.backends.local.tfidf.index import SemanticSearcher
from knowledge_agent.protocols import (
    Backend,
    DenseVectorIndex,
    DocSources,
    IndexState,
    KeywordIndex,
    Sources,
    Storage,
    VectorIndex,
)
from knowledge_agent.storage import SQLiteStorageManager
from knowledge_agent.storage.doc_sources import DocSourceStore
from knowledge_agent.storage.sources import SourceStore


class OneHotEmbedder:
    name = "one-hot:protocols"
    dimensions = 8

    def embed(self, texts: Sequence[str], *, kind: str = "document") -> np.ndarray:
        rows = np.zeros((len(texts), self.dimensions), np.float32)
        rows[:, 0] = 1.0
        return rows


PAIRS = [
    (Backend, SharedIndexes),
    (Storage, SQLiteStorageManager),
    (Sources, SourceStore),
    (DocSources, DocSourceStore),
    (KeywordIndex, SearchIndexManager),
    (VectorIndex, SemanticSearcher),
    (DenseVectorIndex, DenseIndex),
]


def members(protocol: type) -> dict[str, Any]:
    """Name -> the protocol's declaration (a function, a property, or an annotation)."""
    found: dict[str, Any] = {}
    for cls in reversed(protocol.__mro__):
        if cls in (object, Protocol) or not getattr(cls, "_is_protocol", False):
            continue
        found.update(dict.fromkeys(inspect.get_annotations(cls), "attribute"))
        found.update(
            {
                name: value
                for name, value in vars(cls).items()
                if not name.startswith("_") and (callable(value) or isinstance(value, property))
            }
        )
    return found


def accepts(implementation: inspect.Signature, declared: inspect.Signature) -> list[str]:
    """What a call allowed by ``declared`` would find missing in ``implementation``."""
    problems = []
    by_position = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    theirs = [p for p in declared.parameters.values() if p.kind in by_position]
    mine = [p for p in implementation.parameters.values() if p.kind in by_position]
    if len(mine) < len(theirs):
        problems.append(f"{len(mine)} positional parameters for {len(theirs)}")
    for own, wanted in zip(mine, theirs, strict=False):
        if wanted.kind is wanted.POSITIONAL_OR_KEYWORD and own.name != wanted.name:
            problems.append(f"{own.name} where {wanted.name} is")
        if wanted.default is not wanted.empty and own.default is own.empty:
            problems.append(f"{own.name} has no default")
    matched = {p.name for p in mine[: len(theirs)]}
    for wanted in declared.parameters.values():
        if wanted.kind is wanted.KEYWORD_ONLY:
            own = implementation.parameters.get(wanted.name)
            if own is None or own.kind not in (own.KEYWORD_ONLY, own.POSITIONAL_OR_KEYWORD):
                problems.append(f"no keyword {wanted.name}")
            elif wanted.default is not wanted.empty and own.default is own.empty:
                problems.append(f"{own.name} has no default")
    for own in implementation.parameters.values():
        extra = own.name not in matched and own.name not in declared.parameters
        if (
            extra
            and own.default is own.empty
            and own.kind not in (own.VAR_POSITIONAL, own.VAR_KEYWORD)
        ):
            problems.append(f"{own.name} is required")
    return problems


@pytest.mark.parametrize(("protocol", "implementation"), PAIRS, ids=lambda x: x.__name__)
def test_the_local_backend_provides_every_member_with_a_compatible_signature(
    protocol: type, implementation: type
) -> None:
    problems = []
    declared = members(protocol)
    assert declared, protocol
    for name, declaration in declared.items():
        if declaration == "attribute":
            continue  # set in __init__: checked on instances below
        own = inspect.getattr_static(implementation, name, None)
        if own is None:
            problems.append(f"{implementation.__name__} has no {name}")
        elif isinstance(declaration, property):
            if not isinstance(own, property):
                problems.append(f"{name} is not a property")
        else:
            wrong = accepts(inspect.signature(own), inspect.signature(declaration))
            problems += [f"{name}: {text}" for text in wrong]
    assert problems == []


def test_the_local_objects_are_instances_of_the_protocols(tmp_path: Path) -> None:
    core = KnowledgeAgentCore(tmp_path, embedder=OneHotEmbedder())  # type: ignore[arg-type]
    try:
        core.add_text("alpha beta", title="one")
        engine = core.engine
        assert isinstance(core._backend, Backend)
        assert isinstance(engine.storage, Storage)
        assert isinstance(engine.storage.sources, Sources)
        assert isinstance(engine.storage.doc_sources, DocSources)
        assert isinstance(engine.keyword_index, KeywordIndex)
        assert isinstance(engine.semantic_searcher, VectorIndex)
        assert isinstance(engine.dense_index, DenseVectorIndex)
        for index in (engine.keyword_index, engine.semantic_searcher, engine.dense_index):
            assert isinstance(index, IndexState)
        assert not isinstance(engine.keyword_index, DenseVectorIndex)
    finally:
        core.close()
