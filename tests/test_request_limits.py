"""One table of sampling limits: the wire schema and the engine accept and refuse the same values."""

from __future__ import annotations

from typing import Any

import pytest

from blink.engine.errors import InvalidParameterError
from blink.engine.sampling_params import SamplingParams
from blink.gateway.http.request_parsing import validate
from blink.protocol.chat import ChatCompletionRequest
from blink.protocol.errors import InvalidRequestError
from blink.request_limits import INT64_MAX, INT64_MIN, SAMPLING_LIMITS, wrap_seed

L = SAMPLING_LIMITS
# (wire field, engine field, value at the limit, value just past it); the engine's name for
# `top_logprobs` is `logprobs`.
BOUNDARIES: list[tuple[str, str, Any, Any]] = [
    ("temperature", "temperature", L.max_temperature, L.max_temperature + 0.01),
    ("presence_penalty", "presence_penalty", -L.max_penalty, -L.max_penalty - 0.01),
    ("frequency_penalty", "frequency_penalty", L.max_penalty, L.max_penalty + 0.01),
    ("repetition_penalty", "repetition_penalty", L.max_repetition_penalty, L.max_repetition_penalty + 0.01),
    ("top_k", "top_k", L.max_top_k, L.max_top_k + 1),
    ("top_k", "top_k", -1, -2),
    ("seed", "seed", INT64_MAX, INT64_MAX + 1),
    ("seed", "seed", INT64_MIN, INT64_MIN - 1),
    ("max_tokens", "max_tokens", L.max_tokens, L.max_tokens + 1),
    ("top_logprobs", "logprobs", L.max_logprobs, L.max_logprobs + 1),
    ("stop", "stop", ["s"] * L.max_stop_strings, ["s"] * (L.max_stop_strings + 1)),
    ("stop", "stop", ["x" * L.max_stop_chars], ["x" * (L.max_stop_chars + 1)]),
    ("stop_token_ids", "stop_token_ids", [0] * L.max_stop_token_ids, [0] * (L.max_stop_token_ids + 1)),
]


def _wire(field: str, value: Any) -> ChatCompletionRequest:
    body: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "hi"}], field: value}
    if field == "top_logprobs":
        body["logprobs"] = True
    return validate(ChatCompletionRequest, body)


@pytest.mark.parametrize(("wire", "engine", "ok", "bad"), BOUNDARIES,
                         ids=[f"{b[0]}={str(b[3])[:12]}" for b in BOUNDARIES])
def test_schema_and_engine_agree_at_every_limit(wire: str, engine: str, ok: Any, bad: Any) -> None:
    _wire(wire, ok)
    SamplingParams(**{engine: ok}).validate()
    with pytest.raises(InvalidRequestError) as w:
        _wire(wire, bad)
    assert w.value.param is not None and w.value.param.startswith(wire) and w.value.status == 400
    with pytest.raises(InvalidParameterError) as e:
        SamplingParams(**{engine: bad}).validate()
    assert e.value.param == wire


def test_n_is_bounded_by_the_table() -> None:
    _wire("n", L.max_n)
    with pytest.raises(InvalidRequestError) as exc:
        _wire("n", L.max_n + 1)
    assert exc.value.param == "n"


@pytest.mark.parametrize("seed", [0, 7, INT64_MAX, INT64_MAX + 3, INT64_MIN, -1])
def test_wrap_seed_keeps_int64_seeds_and_folds_the_rest(seed: int) -> None:
    wrapped = wrap_seed(seed)
    assert INT64_MIN <= wrapped <= INT64_MAX
    assert (wrapped - seed) % 2**64 == 0
    if INT64_MIN <= seed <= INT64_MAX:
        assert wrapped == seed


def test_logit_bias_values_are_bounded_by_the_table() -> None:
    _wire("logit_bias", {"5": L.max_logit_bias, "6": -L.max_logit_bias})
    with pytest.raises(InvalidRequestError) as exc:
        _wire("logit_bias", {"5": L.max_logit_bias + 1})
    assert exc.value.param is not None and exc.value.param.startswith("logit_bias")
