"""SamplingParams.validate: typed errors naming the OpenAI field."""

from __future__ import annotations

import math

import pytest

from blink.engine.errors import InvalidParameterError
from blink.engine.sampling_params import SamplingParams


def test_defaults_are_valid() -> None:
    p = SamplingParams()
    p.validate()
    assert not p.is_greedy and not p.has_penalties
    assert SamplingParams(temperature=0.0).is_greedy
    assert SamplingParams(top_k=1).is_greedy
    assert SamplingParams(repetition_penalty=1.1).has_penalties


@pytest.mark.parametrize(
    ("kwargs", "param"),
    [
        ({"temperature": -0.1}, "temperature"),
        ({"temperature": 2.5}, "temperature"),
        ({"temperature": math.nan}, "temperature"),
        ({"temperature": True}, "temperature"),
        ({"temperature": "1"}, "temperature"),
        ({"top_p": 0.0}, "top_p"),
        ({"top_p": 1.01}, "top_p"),
        ({"top_k": -2}, "top_k"),
        ({"top_k": 1.5}, "top_k"),
        ({"min_p": -0.1}, "min_p"),
        ({"min_p": 1.1}, "min_p"),
        ({"presence_penalty": 2.1}, "presence_penalty"),
        ({"frequency_penalty": -2.1}, "frequency_penalty"),
        ({"repetition_penalty": 0.0}, "repetition_penalty"),
        ({"repetition_penalty": math.inf}, "repetition_penalty"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"min_tokens": -1}, "min_tokens"),
        ({"max_tokens": 3, "min_tokens": 4}, "min_tokens"),
        ({"logprobs": -1}, "top_logprobs"),
        ({"logprobs": 21}, "top_logprobs"),
        ({"seed": 2**64}, "seed"),
        ({"seed": 1.0}, "seed"),
        ({"stop": [str(i) for i in range(17)]}, "stop"),
        ({"stop": ["x" * 1025]}, "stop"),
        ({"stop_token_ids": list(range(257))}, "stop_token_ids"),
        ({"stop_token_ids": [2**31]}, "stop_token_ids"),
        ({"seed": 2**63}, "seed"),
        ({"seed": -(2**63) - 1}, "seed"),
        ({"top_k": 2**63}, "top_k"),
        ({"top_k": 2**64 - 1}, "top_k"),
        ({"repetition_penalty": 2.5}, "repetition_penalty"),
        ({"max_tokens": 2**63}, "max_tokens"),
        ({"stop": [""]}, "stop"),
        ({"stop": "x"}, "stop"),
        ({"stop_token_ids": [-1]}, "stop_token_ids"),
        ({"ignore_eos": 1}, "ignore_eos"),
    ],
)
def test_invalid_values_name_the_field(kwargs: dict, param: str) -> None:
    with pytest.raises(InvalidParameterError) as exc:
        SamplingParams(**kwargs).validate()
    assert exc.value.param == param


@pytest.mark.parametrize(
    "kwargs",
    [
        {"temperature": 0},
        {"temperature": 2},
        {"top_p": 1e-6},
        {"top_k": 0},
        {"top_k": -1},
        {"top_k": 40},
        {"min_p": 1.0},
        {"presence_penalty": -2.0, "frequency_penalty": 2.0},
        {"repetition_penalty": 1.3},
        {"max_tokens": 1, "min_tokens": 1},
        {"logprobs": 0},
        {"logprobs": 20},
        {"seed": -1},
        {"seed": 2**63 - 1},
        {"seed": -(2**63)},
        {"stop": [str(i) for i in range(16)]},
        {"stop": ["a", "b", "c", "d"], "stop_token_ids": [0, 7]},
    ],
)
def test_boundary_values_are_accepted(kwargs: dict) -> None:
    SamplingParams(**kwargs).validate()


def test_a_grammar_engine_is_one_the_engine_has() -> None:
    SamplingParams(structured=("regex", "a"), structured_engine="xgrammar").validate()
    with pytest.raises(InvalidParameterError) as info:
        SamplingParams(structured=("regex", "a"), structured_engine="outlines").validate()
    assert info.value.param == "structured_engine"
