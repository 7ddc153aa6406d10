"""The generation routes: the JSON Content-Type rule and what reaches an upstream."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import openai
import pytest
from live_server import LiveServer
from upstream_server import FakeUpstream

CHAT_BODY = b'{"model": "fake", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}'


@pytest.fixture(scope="module")
def http(gateway: LiveServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=gateway.url, timeout=10) as client:
        yield client


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data"])
def test_non_json_content_type_is_415(http: httpx.Client, content_type: str) -> None:
    for path in ("/v1/chat/completions", "/v1/completions"):
        resp = http.post(path, content=CHAT_BODY, headers={"content-type": content_type})
        assert resp.status_code == 415, (path, resp.text)
        err = resp.json()["error"]
        assert err["type"] == "invalid_request_error" and err["code"] == "unsupported_media_type"


@pytest.mark.parametrize("content_type", ["application/json", "application/json; charset=utf-8",
                                          "Application/JSON", None])
def test_json_content_types_are_accepted(http: httpx.Client, content_type: str | None) -> None:
    headers = {"content-type": content_type} if content_type else {}
    resp = http.post("/v1/chat/completions", content=CHAT_BODY, headers=headers)
    assert resp.status_code == 200, resp.text


def test_prompt_logprobs_are_refused_for_an_upstream(http: httpx.Client) -> None:
    """The gateway re-encodes an upstream's chunks and would drop them: refused by name."""
    resp = http.post("/v1/completions", json={"model": "fake", "prompt": "hi", "max_tokens": 2, "prompt_logprobs": 1})
    assert resp.status_code == 400, resp.text
    err = resp.json()["error"]
    assert err["param"] == "prompt_logprobs" and err["code"] == "unsupported_parameter"


@pytest.mark.parametrize("stream", [False, True])
def test_return_token_ids_are_relayed_from_an_upstream(gateway: LiveServer, stream: bool) -> None:
    client = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key="unused", max_retries=0)
    kw = {"model": "fake", "prompt": "hi", "max_tokens": 3, "extra_body": {"return_token_ids": True}}
    if not stream:
        choice = client.completions.create(**kw).choices[0]  # type: ignore[call-overload]
        assert choice.model_extra["token_ids"] == [100, 101, 102]
        assert choice.model_extra["prompt_token_ids"] == [1, 2, 3]
        return
    chunks = [c for c in client.completions.create(stream=True, **kw) if c.choices]  # type: ignore[call-overload]
    assert [t for c in chunks for t in c.choices[0].model_extra["token_ids"]] == [100, 101, 102]
    assert chunks[0].choices[0].model_extra["prompt_token_ids"] == [1, 2, 3]


def test_batched_prompts_and_echo_pass_through_to_an_upstream(http: httpx.Client) -> None:
    resp = http.post("/v1/completions", json={"model": "fake", "prompt": ["a", "b"], "max_tokens": 2, "echo": True,
                                              "logit_bias": {"5": 1}})
    assert resp.status_code == 200, resp.text
    assert resp.json()["choices"]


def test_the_upstream_gets_every_field_the_client_sent(gateway: LiveServer, upstream: FakeUpstream) -> None:
    """Typed fields and ``extra`` joined again: a default value the client named is sent (the
    upstream's own default may differ), vendor extras and unmodelled fields pass as sent."""
    client = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key="unused", max_retries=0)
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}]
    sent = {"temperature": 1.0, "max_completion_tokens": 3, "user": "alice", "tools": tools, "tool_choice": "none",
            "response_format": {"type": "json_object"}, "seed": 7, "stop": ["zz"], "logit_bias": {"5": 1}}
    vendor = {"top_k": 4, "chat_template_kwargs": {"x": 1}, "repetition_penalty": 1.0, "speculative": False}
    client.chat.completions.create(model="fake", messages=[{"role": "user", "content": "hi"}], extra_body=vendor,
                                   **sent)  # type: ignore[call-overload]
    got = upstream.requests[-1]
    assert {k: got.get(k) for k in (*sent, *vendor)} == {**sent, **vendor}
    assert got["messages"] == [{"role": "user", "content": "hi"}] and "max_tokens" not in got
    assert "top_p" not in got and "n" not in got  # not sent: the upstream's defaults apply
