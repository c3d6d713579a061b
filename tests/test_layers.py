"""The package's layers: imports point down only (core -> search -> protocols <- backends).

The engine and the ranking it shares with every backend name no backend; the exception tree
and the protocols import nothing of the package at run time, so every layer may use them."""

from __future__ import annotations

import ast
from pathlib import Path

import knowledge_agent

PACKAGE = Path(knowledge_agent.__file__).parent
FACES = {"search_index_manager.py", "semantic_searcher.py"}  # the spec's names, kept


def runtime_imports(path: Path) -> set[str]:
    """The knowledge_agent modules ``path`` imports outside ``if TYPE_CHECKING:``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    checking = {
        id(node)
        for block in ast.walk(tree)
        if isinstance(block, ast.If) and "TYPE_CHECKING" in ast.unparse(block.test)
        for node in ast.walk(block)
    }
    found = set()
    for node in ast.walk(tree):
        if id(node) in checking:
            continue
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {name for name in found if name.split(".")[0] == "knowledge_agent"}


def test_the_engine_and_the_ranking_name_no_backend() -> None:
    below = ("knowledge_agent.backends", "knowledge_agent.storage", "knowledge_agent.core")
    offenders = {
        str(path.relative_to(PACKAGE)): sorted(
            name for name in runtime_imports(path) if name.startswith(below)
        )
        for path in (PACKAGE / "search").rglob("*.py")
        if path.name not in FACES
    }
    assert {path: names for path, names in offenders.items() if names} == {}


def test_backends_storage_and_models_never_reach_up_to_the_core() -> None:
    offenders = {
        str(path.relative_to(PACKAGE)): sorted(
            name for name in runtime_imports(path) if name.startswith("knowledge_agent.core")
        )
        for folder in ("backends", "storage", "models", "search")
        for path in (PACKAGE / folder).rglob("*.py")
    }
    assert {path: names for path, names in offenders.items() if names} == {}


def test_backends_do_not_put_the_engine_together() -> None:
    """The core gives each backend an engine factory: a backend names no search stage."""
    engine = ("knowledge_agent.search.search_engine_impl", "knowledge_agent.search.ranking")
    offenders = {
        str(path.relative_to(PACKAGE)): sorted(
            name for name in runtime_imports(path) if name.startswith(engine)
        )
        for path in (PACKAGE / "backends").rglob("*.py")
    }
    assert {path: names for path, names in offenders.items() if names} == {}


def test_the_exception_tree_and_the_protocols_import_nothing_of_the_package() -> None:
    assert runtime_imports(PACKAGE / "errors.py") == set()
    assert runtime_imports(PACKAGE / "protocols.py") == set()


def test_the_spec_faces_are_the_local_backends_classes() -> None:
    from knowledge_agent.backends.local.keyword.index import SearchIndexManager
    from knowledge_agent.backends.local.tfidf.index import SemanticSearcher
    from knowledge_agent.search import search_index_manager, semantic_searcher

    assert search_index_manager.SearchIndexManager is SearchIndexManager
    assert semantic_searcher.SemanticSearcher is SemanticSearcher
