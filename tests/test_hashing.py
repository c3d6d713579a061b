"""Query hashing in Python gives the columns scikit-learn's HashingVectorizer gives."""

from __future__ import annotations

import subprocess
import sys

from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.feature_extraction.text import HashingVectorizer
from sklearn.utils import murmurhash3_32 as reference_murmurhash

from knowledge_agent.search.hashing import feature_column, murmurhash3_32


@settings(max_examples=300)
@given(st.text(max_size=40), st.integers(min_value=0, max_value=2**31 - 1))
def test_murmurhash_matches_scikit_learn(text: str, seed: int) -> None:
    data = text.encode("utf-8", "surrogatepass")
    assert murmurhash3_32(data, seed) == reference_murmurhash(data, seed)


@settings(max_examples=200)
@given(
    st.lists(st.text(min_size=1, max_size=20), min_size=1, max_size=10),
    st.sampled_from([2**4, 2**18, 2**20, 1000]),
)
def test_feature_columns_match_the_vectorizer(terms: list[str], n_features: int) -> None:
    vectorizer = HashingVectorizer(
        analyzer=lambda doc: doc, n_features=n_features, alternate_sign=False, norm=None
    )
    row = vectorizer.transform([terms])
    expected = dict(zip(row.indices.tolist(), row.data.tolist(), strict=True))
    got: dict[int, float] = {}
    for term in terms:
        column = feature_column(term, n_features)
        got[column] = got.get(column, 0.0) + 1.0
    assert got == expected


def test_opening_and_querying_does_not_import_scikit_learn(tmp_path) -> None:
    from knowledge_agent import KnowledgeAgentCore

    with KnowledgeAgentCore(tmp_path / "kb") as core:
        core.add_text("Rotate the signing keys every quarter.", title="Keys")
    code = (
        "import sys\n"
        "from knowledge_agent import KnowledgeAgentCore\n"
        f"core = KnowledgeAgentCore({str(tmp_path / 'kb')!r})\n"
        "assert core.search('signing keys')[0].item.title == 'Keys'\n"
        "print('sklearn' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
