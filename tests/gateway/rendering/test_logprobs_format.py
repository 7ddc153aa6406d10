"""The logprobs shapes: completions' top_logprobs always name the chosen token, an echoed prompt's
first token is null, and vLLM's prompt_logprobs map token ids to logprob, rank and text."""

from __future__ import annotations

from blink.backends.base import PromptLogprob, TokenLogprob
from blink.gateway.rendering.logprobs_format import completion_logprobs, prompt_logprobs


def test_completion_top_logprobs_hold_the_chosen_token_even_at_zero() -> None:
    items = [TokenLogprob("a", -0.5), TokenLogprob("b", -2.0, top=[("c", -0.1)])]
    out = completion_logprobs(items, 3)
    assert out["top_logprobs"] == [{"a": -0.5}, {"c": -0.1, "b": -2.0}]
    assert out["text_offset"] == [3, 4] and out["tokens"] == ["a", "b"]


def test_an_echoed_first_token_has_null_logprob_and_top() -> None:
    out = completion_logprobs([TokenLogprob("<s>", None), TokenLogprob("x", -1.0)], 0)
    assert out["token_logprobs"] == [None, -1.0] and out["top_logprobs"] == [None, {"x": -1.0}]


def test_prompt_logprobs_vllm_shape() -> None:
    entries = [None, PromptLogprob(7, "hi", -3.0, 4, [(1, "a", -0.5), (2, "b", -1.0)]),
               PromptLogprob(1, "a", -0.5, 1, [(1, "a", -0.5)])]
    out = prompt_logprobs(entries)
    assert out[0] is None
    assert out[1] == {"7": {"logprob": -3.0, "rank": 4, "decoded_token": "hi"},
                      "1": {"logprob": -0.5, "rank": 1, "decoded_token": "a"},
                      "2": {"logprob": -1.0, "rank": 2, "decoded_token": "b"}}
    assert out[2] == {"1": {"logprob": -0.5, "rank": 1, "decoded_token": "a"}}
