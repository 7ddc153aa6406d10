"""WordNet 3.0 synonyms as the hit guard reads them: shared synsets, base forms, two-word
expressions; never an opposite, a broader word or another name."""

from __future__ import annotations

import importlib.util

import pytest

from blink.gateway.cache import synonyms as syn


@pytest.mark.parametrize(
    ("a", "b"),
    [("purchase", "buy"), ("automobile", "car"), ("begin", "commence"), ("geese", "goose"),
     ("purchased", "bought"), ("investigate", "look_into"), ("holland", "netherlands")],
)  # fmt: skip
def test_synonyms(a: str, b: str) -> None:
    assert syn.synonyms(a, b) and syn.synonyms(b, a)


@pytest.mark.parametrize(
    ("a", "b"),
    [("buy", "sell"), ("borrow", "lend"), ("include", "exclude"), ("dog", "animal"),  # opposites, a hypernym
     ("austria", "australia"), ("leeds", "hull"), ("card", "card"), ("zzqx", "qxzz"), ("", "car")],
)  # fmt: skip
def test_not_synonyms(a: str, b: str) -> None:
    assert not syn.synonyms(a, b)


def test_can_be_noun() -> None:
    assert syn.can_be_noun("card") and syn.can_be_noun("policies")
    assert not syn.can_be_noun("available") and not syn.can_be_noun("quickly")


def test_missing_data_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    assert not syn.available()
    with pytest.raises(syn.WordNetMissing, match="blink-serve\\[semantic\\]"):
        syn._data_dir()


def test_a_guarded_cache_without_wordnet_refuses_to_start(monkeypatch: pytest.MonkeyPatch) -> None:
    # Not a 500 on the first hit: the matcher is built at start-up and says what to install.
    from blink.gateway.cache.semantic import GuardedMatcher

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(syn.WordNetMissing):
        GuardedMatcher(embedder=object(), threshold=0.72)  # type: ignore[arg-type]
    GuardedMatcher(embedder=object(), threshold=0.72, guard=False)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("a", "b"),
    [("won", "lost"), ("allowed", "forbidden"), ("rare", "common"), ("widening", "narrowing"),  # inflected forms
     ("legal", "illegal"), ("asleep", "awake"), ("shallow", "deep"), ("increased", "decreases")],
)  # fmt: skip
def test_antonyms(a: str, b: str) -> None:
    assert syn.antonyms(a, b) and syn.antonyms(b, a)


@pytest.mark.parametrize(
    ("a", "b"),
    [("big", "large"), ("buy", "purchase"), ("rare", "rare"), ("dog", "cat"), ("zzqx", "big"), ("", "deep")],
)  # fmt: skip
def test_not_antonyms(a: str, b: str) -> None:
    assert not syn.antonyms(a, b)


@pytest.mark.parametrize(("a", "b"), [("puppy", "kitten"), ("lunch", "dinner"), ("pint", "quart"), ("tablespoons", "teaspoons")])
def test_co_hyponyms(a: str, b: str) -> None:
    assert syn.co_hyponyms(a, b) and syn.co_hyponyms(b, a)


@pytest.mark.parametrize(("a", "b"), [("street", "road"), ("car", "automobile"), ("dog", "dog"), ("quickly", "fast"), ("zzqx", "dog")])
def test_not_co_hyponyms(a: str, b: str) -> None:
    assert not syn.co_hyponyms(a, b)
