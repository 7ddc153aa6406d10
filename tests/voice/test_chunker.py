"""The clause chunker: first clause early, sentences whole, nothing lost."""

from __future__ import annotations

from blink.voice.chunker import ClauseChunker


def test_sentences_and_clauses_are_cut_as_they_complete() -> None:
    c = ClauseChunker()
    assert c.push("Sure") == []
    assert c.push(", I can help. The train") == ["Sure, I can help."]
    assert c.push(" leaves at noon, from platform two; it is") == ["The train leaves at noon,", "from platform two;"]
    assert c.flush() == "it is"
    assert c.flush() is None


def test_short_clause_waits_for_more_text() -> None:
    c = ClauseChunker(min_clause_chars=16)
    assert c.push("Well, ") == []
    assert c.push("that depends on the weather. ") == ["Well, that depends on the weather."]


def test_first_chunk_without_punctuation_is_cut_at_a_space() -> None:
    c = ClauseChunker(first_max_chars=20, max_chars=60)
    text = "one two three four five six seven eight nine ten eleven twelve"
    out = c.push(text)
    assert out == ["one two three four five six seven eight nine ten eleven"]
    assert c.push(" thirteen fourteen") == []  # later chunks may run to max_chars
    rest = c.flush()
    assert " ".join(out + [rest or ""]) == text + " thirteen fourteen"
