"""StopStringMatcher: stops spanning deltas, minimal hold-back, exclusion of the stop string."""

from __future__ import annotations

import random

import pytest

from blink.engine.stop import StopStringMatcher


def run(stops: list[str], pieces: list[str]) -> tuple[str, bool, list[str]]:
    m = StopStringMatcher(stops)
    emitted: list[str] = []
    stopped = False
    for p in pieces:
        out, stopped = m.feed(p)
        emitted.append(out)
        if stopped:
            break
    if not stopped:
        emitted.append(m.flush())
    return "".join(emitted), stopped, emitted


def test_stop_inside_one_delta() -> None:
    text, stopped, _ = run(["END"], ["hello END world"])
    assert (text, stopped) == ("hello ", True)


def test_stop_spanning_deltas() -> None:
    text, stopped, emitted = run(["</answer>"], ["42 </", "ans", "wer> trailing"])
    assert (text, stopped) == ("42 ", True)
    assert emitted[0] == "42 "  # "</" held back, "42 " released at once


def test_only_possible_prefix_is_held() -> None:
    m = StopStringMatcher(["abc"])
    assert m.feed("xxa") == ("xx", False)
    assert m.feed("b") == ("", False)
    assert m.feed("x") == ("abx", False)  # broken: released
    assert m.flush() == ""


def test_no_stop_flushes_everything() -> None:
    text, stopped, _ = run(["zzz"], ["ab", "cz", "z"])
    assert (text, stopped) == ("abczz", False)


def test_earliest_of_several_stops_wins() -> None:
    m = StopStringMatcher(["world", "lo w"])
    assert m.feed("hello world") == ("hel", True)
    assert m.matched == "lo w"
    assert m.feed("more") == ("", True)
    assert m.flush() == ""


def test_stop_at_very_start_and_overlapping_prefixes() -> None:
    assert run(["\n\n"], ["\n", "\n", "x"])[:2] == ("", True)
    # "aab" inside "aaab": the held suffix must shrink correctly as mismatches arrive.
    assert run(["aab"], ["a", "a", "a", "b", "c"])[:2] == ("a", True)


def test_empty_stop_list_passes_through() -> None:
    m = StopStringMatcher([])
    assert m.feed("anything") == ("anything", False)


@pytest.mark.parametrize("seed", range(20))
def test_random_splits_match_reference(seed: int) -> None:
    rng = random.Random(seed)
    alphabet = "ab\n<>/"
    stops = ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 4))) for _ in range(2)]
    text = "".join(rng.choice(alphabet) for _ in range(60))
    cuts = sorted(rng.sample(range(1, len(text)), 12))
    pieces = [text[i:j] for i, j in zip([0, *cuts], [*cuts, len(text)], strict=True)]
    hits = [(text.find(s), s) for s in stops if s in text]
    expected = text[: min(hits)[0]] if hits else text
    got, stopped, _ = run(stops, pieces)
    assert got == expected and stopped == bool(hits)
