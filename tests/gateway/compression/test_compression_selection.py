"""Choosing words by self-information: order, shape and ratio hold; misaligned tokens change nothing."""

from __future__ import annotations

from blink.gateway.compression.selection import ScoredToken, align, select_words


def words_as_tokens(text: str, surprisal: dict[str, float]) -> list[ScoredToken]:
    """One token per word (with its leading space), the first unpredicted as a scorer returns it."""
    import re

    pieces = re.findall(r"\s*\S+", text)
    return [ScoredToken("" if i == 0 else p, None if i == 0 else surprisal.get(p.strip(), 1.0))
            for i, p in enumerate(pieces)]


def test_align_spells_the_text_with_an_unknown_first_token() -> None:
    text = "Quarterly revenue grew"
    tokens = [ScoredToken("", None), ScoredToken("ly", 2.0), ScoredToken(" revenue", 1.0), ScoredToken(" grew", 3.0)]
    assert align(text, tokens) == [0, 7, 9, 17]


def test_align_gives_up_on_tokens_that_do_not_spell_the_text() -> None:
    tokens = [ScoredToken("", None), ScoredToken(" something", 1.0), ScoredToken(" else", 1.0)]
    assert align("A completely different sentence that goes on and on for a while longer", tokens) is None


def test_partial_utf8_tokens_take_no_width() -> None:
    text = "naïve café menu"
    tokens = [ScoredToken("", None), ScoredToken("a", 1.0), ScoredToken("\ufffd", 1.0), ScoredToken("\ufffd", 1.0),
              ScoredToken("ve", 1.0), ScoredToken(" caf", 1.0), ScoredToken("é", 1.0), ScoredToken(" menu", 1.0)]
    starts = align(text, tokens)
    assert starts is not None and starts[-1] == text.index(" menu")


def test_keeps_the_most_surprising_words_in_order() -> None:
    text = "the invoice of the customer was paid on the fourth of March by wire"
    tokens = words_as_tokens(text, {"the": 0.1, "of": 0.2, "on": 0.3, "by": 0.2, "was": 0.4,
                                    "invoice": 5.0, "customer": 4.0, "paid": 3.5, "fourth": 6.0, "March": 6.0,
                                    "wire": 5.5})
    out, dropped = select_words(text, tokens, 0.5)  # type: ignore[misc]
    kept = out.split()
    assert "the" not in kept[1:] and "of" not in kept
    words = iter(text.split())
    assert all(any(w == k for w in words) for k in kept)  # a subsequence: order unchanged
    assert {"fourth", "March", "wire", "invoice"} <= set(kept)
    assert dropped == len(tokens) - len(kept)
    assert abs(len(kept) - len(tokens) / 2) <= 1


def test_line_breaks_of_dropped_words_are_kept() -> None:
    text = "Item one costs money\nthe Item two costs more\nItem three"
    tokens = words_as_tokens(text, {"the": 0.01, "costs": 0.1, "one": 4, "two": 4, "three": 4, "money": 3, "more": 3})
    out, _ = select_words(text, tokens, 0.7)  # type: ignore[misc]
    assert out.count("\n") == 2


def test_nothing_to_do_returns_none() -> None:
    assert select_words("word", [ScoredToken("", None)], 0.5) is None
    assert select_words("two words", words_as_tokens("two words", {}), 1.0) is None
