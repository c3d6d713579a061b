"""SearchConfig: how the chunk stage ranks and fuses (a module of its own, so settings and the
command line can read it without importing the engines)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from knowledge_agent.errors import ConfigError
from knowledge_agent.search.ranking.boosts import DEFAULT_DOC_TYPE_WEIGHTS
from knowledge_agent.search.ranking.fusion import FUSION_METHODS

__all__ = ["KeywordIndexConfig", "SearchConfig", "TfidfConfig"]


@dataclass(frozen=True, kw_only=True)
class SearchConfig:
    """How the chunk stage ranks and fuses; the defaults come from benchmarks/quality.py."""

    fusion: str = "rrf"
    keyword_weight: float = 2.0
    semantic_weight: float = 1.0
    dense_weight: float = 1.0
    """Weight of the dense (embedding) ranking, when an embedder is set."""
    rrf_k: int = 60
    candidates: int = 100
    max_chunks_per_item: int = 3
    max_query_terms: int = 512
    passage_depth: int = 20
    """How many of the best fused chunks are re-scored by their best line or sentence."""
    passage_candidates: int = 6
    """How many of a shown document's best chunks are re-scored that way too, so the
    passage shown first is the one with the strongest evidence in the document."""
    coverage_weight: float = 0.1
    """Added × the share of the query's terms (idf-weighted) the chunk's best unit holds."""
    proximity_weight: float = 0.2
    """Added × the share of the query's word pairs found together in that unit."""
    document_weight: float = 0.1
    """Added × the BM25 of the chunk's whole document, scaled to the best document's."""
    dense_passage_weight: float = 0.0
    """Added × the chunk's dense (embedding) cosine to the query, when the dense ranking ran:
    the meaning of a passage weighed beside its words (0: the dense ranking only votes in
    the fusion)."""
    known_item_share: float = 0.4
    """A hybrid query whose best keyword chunk scores at least this share of the best BM25
    the query could reach is ranked by keywords alone; 0 turns this off."""
    expansion_terms: int = 0
    """Words of the first hits added to a query whose first pass found no confident match
    (pseudo-relevance feedback, RM3); 0 turns it off."""
    expansion_gate: float = 0.6
    """A query is widened only when its best first-pass confidence is below this …"""
    expansion_min_terms: int = 8
    """… and it has at least this many distinct terms …"""
    expansion_languages: tuple[str, ...] = ("en",)
    """… and is in one of these languages (measured: +0.009 on Cranfield, −0.005 on CMRC
    2018), as the dense ranking is gated by its embedder's; empty: any language."""
    expansion_original_weight: float = 0.5
    """The share of the query's own terms in a widened query."""
    feedback_chunks: int = 5
    """How many first-pass chunks the added words are taken from."""
    doc_type_weights: Mapping[str, float] = field(
        default_factory=lambda: dict(DEFAULT_DOC_TYPE_WEIGHTS), hash=False
    )
    """Multiplies the score of items of a doc type (the document boost; default adr 1.5,
    spec 1.4, runbook 1.3, guide 1.1, index 0.3; ``{}`` turns it off)."""
    recency_weight: float = 0.0
    """The recency boost ``1 + recency_weight · exp(−age_days / recency_days)`` (0: off; 0.5
    favours what changed this month by up to 1.5×)."""
    recency_days: float = 30.0
    decay_half_life: float = 0.0
    """Temporal decay: a score halves every this many days of age (0: off)."""
    mmr_lambda: float = 0.0
    """Maximal marginal relevance among the results: 1 keeps the score order, lower values
    push near-duplicates of better results down (0: off)."""
    rerank_depth: int = 10
    """How many of the best results a reranker re-scores, when a search asks for one."""
    rerank_weight: float = 1.0
    """What the reranker's scores add, scaled to the best score (the rerank delta)."""
    default_top_k: int | None = None
    """Results a search returns when its call gives no count (None: the interface's own,
    10 for ``search``, 5 for ``knowledge_semantic_search``); 002's ``default_top_k``."""
    rerank_top_k: int = 3
    """Passages ``knowledge_semantic_search`` keeps after a rerank when the call does not say."""
    enable_rerank: bool | None = None
    """Whether ``knowledge_semantic_search`` reranks when the call does not say (None:
    whenever a reranker is configured)."""

    def __post_init__(self) -> None:
        languages = self.expansion_languages
        if isinstance(languages, str) or not all(isinstance(x, str) for x in languages):
            raise ConfigError(f"expansion_languages must be language codes, got {languages!r}")
        object.__setattr__(self, "expansion_languages", tuple(languages))  # a TOML list too
        if self.fusion not in FUSION_METHODS:
            raise ConfigError(f"fusion must be one of {FUSION_METHODS}, got {self.fusion!r}")
        for name in (
            "keyword_weight",
            "semantic_weight",
            "dense_weight",
            "coverage_weight",
            "proximity_weight",
            "document_weight",
            "dense_passage_weight",
            "recency_weight",
            "recency_days",
            "decay_half_life",
            "rerank_weight",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise ConfigError(f"{name} must be a number >= 0, got {value!r}")
        for name in (
            "rrf_k",
            "candidates",
            "max_chunks_per_item",
            "max_query_terms",
            "passage_depth",
            "passage_candidates",
            "feedback_chunks",
            "expansion_min_terms",
            "rerank_depth",
            "rerank_top_k",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name} must be an integer >= 1, got {value!r}")
        if isinstance(self.expansion_terms, bool) or not isinstance(self.expansion_terms, int):
            raise ConfigError(f"expansion_terms must be an integer, got {self.expansion_terms!r}")
        if self.expansion_terms < 0:
            raise ConfigError(f"expansion_terms must be >= 0, got {self.expansion_terms!r}")
        for name in (
            "expansion_gate",
            "expansion_original_weight",
            "known_item_share",
            "mmr_lambda",
        ):
            value = getattr(self, name)
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not 0 <= value <= 1
            ):
                raise ConfigError(f"{name} must be a number within 0 and 1, got {value!r}")
        if self.default_top_k is not None and (
            isinstance(self.default_top_k, bool)
            or not isinstance(self.default_top_k, int)
            or self.default_top_k < 1
        ):
            raise ConfigError(f"default_top_k must be an integer >= 1, got {self.default_top_k!r}")
        if self.enable_rerank is not None and not isinstance(self.enable_rerank, bool):
            raise ConfigError(f"enable_rerank must be true or false, got {self.enable_rerank!r}")
        if not isinstance(self.doc_type_weights, Mapping):
            raise ConfigError(f"doc_type_weights must be a mapping, got {self.doc_type_weights!r}")
        for doc_type, weight in self.doc_type_weights.items():
            if isinstance(weight, bool) or not isinstance(weight, (int, float)) or weight < 0:
                raise ConfigError(f"doc_type_weights[{doc_type!r}] must be a number >= 0")


@dataclass(frozen=True, kw_only=True)
class KeywordIndexConfig:
    """The keyword (Whoosh, BM25F) chunk index."""

    field_boosts: Mapping[str, float] = field(default_factory=dict)
    """BM25F weights of the fields to change (``title``, ``heading``, ``content``, …); the
    others keep the index's defaults."""
    lock_timeout: float = 10.0
    """Seconds to wait for Whoosh's own write lock."""


@dataclass(frozen=True, kw_only=True)
class TfidfConfig:
    """The semantic (TF-IDF) chunk index. Any change rebuilds it: it changes the vectors."""

    n_features: int = 2**20
    """Hashed feature space (terms are hashed, no vocabulary is kept)."""
    sublinear_tf: bool = True
    """1 + log(tf) instead of raw term counts."""
    include_title: bool = False
    """Index the document title with every chunk."""
    include_heading: bool = True
    """Index the chunk's heading path with its text."""

    def changed(self) -> dict[str, Any]:
        """The fields set away from their defaults (what an index's fingerprint records)."""
        default = TfidfConfig()
        return {
            name: getattr(self, name)
            for name in self.__dataclass_fields__
            if getattr(self, name) != getattr(default, name)
        }
