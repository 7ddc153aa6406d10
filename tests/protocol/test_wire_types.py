from __future__ import annotations

import pytest
from pydantic import ValidationError

from blink.protocol.chat import ChatCompletionRequest
from blink.protocol.completions import CompletionRequest
from blink.protocol.errors import UpstreamClientError


def test_chat_request_accepts_openai_and_vllm_fields() -> None:
    req = ChatCompletionRequest.model_validate({
        "model": "m", "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": [{"type": "text", "text": "hi"}]},
                                   {"role": "assistant", "content": None, "tool_calls": [], "refusal": None}],
        "stream": True, "stream_options": {"include_usage": True}, "n": 2, "stop": ["x"], "seed": 1,
        "logprobs": True, "top_logprobs": 3, "max_completion_tokens": 5, "temperature": 0, "top_p": 0.9,
        "top_k": 40, "min_p": 0.1, "repetition_penalty": 1.1, "min_tokens": 1, "ignore_eos": True,
        "stop_token_ids": [2], "tools": [{"type": "function"}], "response_format": {"type": "text"},
    })
    assert req.n == 2 and req.stream_options is not None and req.stream_options.include_usage


def test_strict_types_and_unknown_fields() -> None:
    with pytest.raises(ValidationError):
        ChatCompletionRequest.model_validate({"model": "m", "messages": [{"role": "user", "content": "x"}], "n": "2"})
    with pytest.raises(ValidationError):
        ChatCompletionRequest.model_validate({"model": "m", "messages": [{"role": "user", "content": "x"}], "zzz": 1})


def test_completion_prompt_shapes() -> None:
    for prompt in ("a", ["a"], [1, 2], [[1, 2]]):
        assert CompletionRequest.model_validate({"model": "m", "prompt": prompt}).prompt == prompt


def test_upstream_client_error_keeps_type() -> None:
    err = UpstreamClientError("nope", status=422, error_type="invalid_request_error", param="x", code="c")
    assert err.status == 422
    assert err.body() == {"error": {"message": "nope", "type": "invalid_request_error", "param": "x", "code": "c"}}
