"""URL normalisation and the crawl policy, spelling by spelling."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from knowledge_agent.crawl.policy import UrlPolicy
from knowledge_agent.crawl.urls import normalize_url


def test_a_query_value_keeps_its_slashes_colons_and_equals_signs() -> None:
    url = "https://example.com/login?next=/docs/a:b&token=abc=="
    assert normalize_url(url) == url


def test_a_query_field_without_a_value_stays_bare_and_differs_from_an_empty_value() -> None:
    assert normalize_url("https://example.com/p?flag&b=") == "https://example.com/p?b=&flag"
    assert normalize_url("https://example.com/p?flag") != normalize_url(
        "https://example.com/p?flag="
    )


def test_control_characters_around_a_url_go_but_unicode_spaces_are_part_of_it() -> None:
    # WHATWG strips C0 controls and spaces at the edges, not U+00A0 or U+3000.
    assert normalize_url("\x01\x1f https://example.com/a \x00") == "https://example.com/a"
    assert normalize_url("https://example.com/a\u00a0") == "https://example.com/a%C2%A0"
    assert normalize_url("\u3000guide", "https://example.com/docs/") == (
        "https://example.com/docs/%E3%80%80guide"
    )


def test_a_lone_surrogate_in_a_path_is_percent_encoded_not_an_error() -> None:
    assert normalize_url("https://example.com/a\ud800b") == "https://example.com/a%ED%A0%80b"


# st.text never yields a lone surrogate, so the characters are drawn one by one.
_ANY_CHARACTERS = st.lists(st.characters() | st.characters(categories=("Cs",)), max_size=20)


@given(_ANY_CHARACTERS.map("".join))
def test_any_path_text_normalises_to_ascii(path: str) -> None:
    """Whatever the characters (surrogates included), a path under a host normalises to
    one ASCII spelling, stable when normalised again."""
    normalized = normalize_url("https://example.com/" + path)
    assert normalized.isascii()
    assert normalize_url(normalized) == normalized


def test_a_prefix_with_a_query_holds_its_own_path_with_that_query_only() -> None:
    policy = UrlPolicy(("https://example.com/search?q=",))
    assert policy.refusal("https://example.com/search?q=keys") is None
    assert policy.refusal("https://example.com/search/?q=keys") is None
    assert policy.refusal("https://example.com/other?q=keys") == (
        "https://example.com/other?q=keys is not under an allowed URL prefix"
    )
    assert policy.refusal("https://example.com/search?lang=en") is not None


def test_a_robots_hop_that_is_no_http_url_is_refused_with_the_reason() -> None:
    policy = UrlPolicy(("https://example.com/docs",))
    assert policy.robots_refusal("ftp://example.com/robots.txt") == (
        "not an http(s) URL: 'ftp://example.com/robots.txt'"
    )
    assert policy.robots_refusal("https://example.com/robots.txt") is None
