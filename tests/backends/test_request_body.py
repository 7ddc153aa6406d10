"""A client's body -> typed fields + ``extra`` -> the body again: nothing the client sent is lost."""

from __future__ import annotations

from typing import Any

import pytest

from blink.backends.base import GenerationRequest, SamplingOptions
from blink.backends.request_body import MODELLED_FIELDS, openai_body, split_body
from blink.gateway.chat.request_mapping import chat_request, completion_request
from blink.gateway.http.request_parsing import validate
from blink.gateway.router.attempt_request import continuation, with_logprobs
from blink.protocol.chat import ChatCompletionRequest
from blink.protocol.completions import CompletionRequest

MESSAGES = [{"role": "user", "content": "hi"}]
TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]


def _chat(body: dict[str, Any]) -> GenerationRequest:
    return chat_request(validate(ChatCompletionRequest, body), body, "m", 1000, None)


@pytest.mark.parametrize("body", [
    {"model": "m", "messages": MESSAGES},
    # Modelled fields at their default values: sent, so they are sent on (an upstream's own
    # default may differ), and the budget keeps the client's name for it.
    {"model": "m", "messages": MESSAGES, "temperature": 1.0, "top_p": 1.0, "n": 1, "max_completion_tokens": 7,
     "logprobs": False, "stream": False},
    {"model": "m", "messages": MESSAGES, "temperature": 0.2, "seed": 3, "stop": ["x"], "top_k": 5, "min_p": 0.1,
     "logprobs": True, "top_logprobs": 2, "logit_bias": {"7": -1.0}, "max_tokens": 9, "presence_penalty": 0.5,
     "tools": TOOLS, "tool_choice": "auto", "parallel_tool_calls": False, "user": "alice",
     "response_format": {"type": "json_object"}, "chat_template_kwargs": {"x": 1}, "speculative": False,
     "stream": True, "stream_options": {"include_usage": True}, "vendor_field": {"kept": True}},
])
def test_a_chat_body_comes_back_as_sent(body: dict[str, Any]) -> None:
    if "vendor_field" in body:  # the schema refuses unknown fields; an extra set by hand still passes
        req = _chat({k: v for k, v in body.items() if k != "vendor_field"})
        req.extra["vendor_field"] = body["vendor_field"]
    else:
        req = _chat(body)
    assert openai_body(req) == body


def test_extra_holds_only_unmodelled_fields() -> None:
    req = _chat({"model": "m", "messages": MESSAGES, "temperature": 0, "max_tokens": 3, "tools": TOOLS, "user": "u"})
    assert req.extra == {"tools": TOOLS, "user": "u"}
    assert not MODELLED_FIELDS & req.extra.keys()
    assert req.sent_options == {"model", "messages", "temperature", "max_tokens"}


def test_a_completion_body_comes_back_as_sent() -> None:
    body = {"model": "m", "prompt": ["a", "b"], "logprobs": 0, "echo": True, "max_tokens": 4, "suffix": None}
    req = completion_request(validate(CompletionRequest, body), body, "m", 1000, None)
    # null is "not sent": it is neither modelled nor passed on as a value.
    assert openai_body(req) == {"model": "m", "prompt": ["a", "b"], "logprobs": 0, "echo": True, "max_tokens": 4,
                                "suffix": None}


def test_unsent_defaults_stay_unsent_but_edits_are_written() -> None:
    """An upstream fills what the client left out; an edit (retry, probe) is written whatever it is."""
    req = _chat({"model": "m", "messages": MESSAGES, "max_completion_tokens": 8})
    edited = continuation(with_logprobs(req), "so far", 3)
    assert openai_body(edited) == {
        "model": "m", "messages": [*MESSAGES, {"role": "assistant", "content": "so far"}],
        "max_completion_tokens": 5, "logprobs": True,
    }
    assert openai_body(req)["messages"] == MESSAGES  # the client's request is unchanged


def test_a_request_built_by_hand_writes_what_differs_from_the_defaults() -> None:
    req = GenerationRequest("r", "m", "completion", SamplingOptions(max_tokens=2, temperature=0.0, logit_bias={5: 1.0}),
                            prompt="say")
    assert openai_body(req) == {"model": "m", "prompt": "say", "max_tokens": 2, "temperature": 0.0,
                                "logit_bias": {"5": 1.0}}


def test_split_body_ignores_nulls() -> None:
    extra, sent = split_body({"model": "m", "messages": [], "seed": None, "tools": None})
    assert extra == {"tools": None} and sent == {"model", "messages"}
