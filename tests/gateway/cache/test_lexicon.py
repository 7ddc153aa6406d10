"""Word relations by rule: one word (typo, spelling, inflection) vs two (opposites, look-alike names)."""

from __future__ import annotations

import pytest

from blink.gateway.cache.lexicon import is_word, look_alike, opposed, same_lemma, stem, variant


def _variant(a: str, b: str) -> bool:
    return variant(stem(a), stem(b), a, b)


@pytest.mark.parametrize(
    ("a", "b"),
    [("address", "adress"), ("receipt", "reciept"), ("theatre", "theater"), ("colour", "color"),
     ("analyse", "analyze"), ("quote", "quotation"), ("agent", "agency"), ("refund", "refunds"),
     ("boxes", "box"), ("ounces", "ounce"), ("travelled", "traveled")],
)  # fmt: skip
def test_one_word(a: str, b: str) -> None:
    assert _variant(a, b)


@pytest.mark.parametrize(
    ("a", "b"),
    [("austria", "australia"), ("niger", "nigeria"), ("debt", "debit"), ("lock", "unlock"),
     ("safe", "unsafe"), ("form", "forum"), ("dominica", "dominican"), ("import", "export")],
)  # fmt: skip
def test_two_words(a: str, b: str) -> None:
    assert not _variant(a, b)


@pytest.mark.parametrize(
    ("a", "b"),
    [("subscribe", "unsubscribing"), ("enable", "disable"), ("include", "exclude"), ("increase", "decrease"),
     ("upload", "download"), ("take", "avoid"), ("connect", "disconnect"), ("legal", "illegal"),
     ("buy", "sell"), ("encrypt", "decrypt")],
)  # fmt: skip
def test_opposed(a: str, b: str) -> None:
    assert opposed(stem(a), stem(b)) and opposed(stem(b), stem(a))


@pytest.mark.parametrize(("a", "b"), [("switch", "change"), ("street", "road"), ("kid", "child"), ("price", "cost")])
def test_synonyms_are_not_opposed(a: str, b: str) -> None:
    assert not opposed(stem(a), stem(b))


def test_look_alike_and_lemma_rules() -> None:
    assert look_alike("slovenia", "slovakia") and look_alike("iran", "iraq") and look_alike("niger", "nigeria")
    assert not look_alike("street", "road")
    assert same_lemma("quote", "quotation") and not same_lemma("niger", "nigeria")


def test_the_word_list_is_wordnet() -> None:
    assert is_word("warranty") and is_word("Australia") and not is_word("adress")


def test_stem_undoubles_a_consonant_before_ed_and_ing() -> None:
    assert [stem(w) for w in ("banned", "permitted", "stopping", "planned")] == ["ban", "permit", "stop", "plan"]
    assert [stem(w) for w in ("called", "missed", "added", "buzzed", "seeing")] == ["call", "miss", "add", "buzz", "see"]


def test_english_knows_derived_words_but_not_names() -> None:
    from blink.gateway.cache.lexicon import english

    assert english("refundable") and english("bookable") and english("deposit")
    assert not english("cetirizine") and not english("kotlin") and not english("zzqx")
