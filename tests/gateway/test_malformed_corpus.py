"""Malformed requests: each gets an OpenAI-style JSON error with the right status, type and param."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest
from live_server import LiveServer

CHAT = "/v1/chat/completions"
COMP = "/v1/completions"
IRE = "invalid_request_error"
M = [{"role": "user", "content": "hi"}]


def chat(**fields: Any) -> dict[str, Any]:
    return {"model": "fake", "messages": M, **fields}


def comp(**fields: Any) -> dict[str, Any]:
    return {"model": "fake", "prompt": "hi", **fields}


# (id, path, body: dict | bytes, status, error.type, error.param)
CORPUS: list[tuple[str, str, Any, int, str, str | None]] = [
    ("invalid-json", CHAT, b'{"model": "fake",', 400, IRE, None),
    ("empty-body", CHAT, b"", 400, IRE, None),
    ("json-array", CHAT, b"[]", 400, IRE, None),
    ("json-string", CHAT, b'"hello"', 400, IRE, None),
    ("json-null", CHAT, b"null", 400, IRE, None),
    ("not-utf8", CHAT, b'{"model": "\xff"}', 400, IRE, None),
    ("missing-messages", CHAT, {"model": "fake"}, 400, IRE, "messages"),
    ("empty-messages", CHAT, chat(messages=[]), 400, IRE, "messages"),
    ("messages-string", CHAT, chat(messages="hi"), 400, IRE, "messages"),
    ("message-not-object", CHAT, chat(messages=["hi"]), 400, IRE, "messages[0]"),
    ("bad-role", CHAT, chat(messages=[{"role": "wizard", "content": "x"}]), 400, IRE, "messages[0].role"),
    ("missing-role", CHAT, chat(messages=[{"content": "x"}]), 400, IRE, "messages[0].role"),
    ("role-int", CHAT, chat(messages=[{"role": 1, "content": "x"}]), 400, IRE, "messages[0].role"),
    ("content-int", CHAT, chat(messages=[{"role": "user", "content": 5}]), 400, IRE, "messages[0].content"),
    ("user-without-content", CHAT, chat(messages=[{"role": "user"}]), 400, IRE, "messages[0]"),
    ("tool-without-content", CHAT, chat(messages=[*M, {"role": "tool"}]), 400, IRE, "messages[1]"),
    ("content-parts-not-objects", CHAT, chat(messages=[{"role": "user", "content": [1]}]), 400, IRE,
     "messages[0].content"),
    ("unknown-field", CHAT, chat(foo=1), 400, IRE, "foo"),
    ("unknown-field-typo", CHAT, chat(max_token=5), 400, IRE, "max_token"),
    ("unknown-stream-option", CHAT, chat(stream_options={"bogus": True}), 400, IRE, "stream_options.bogus"),
    ("model-int", CHAT, chat(model=3), 400, IRE, "model"),
    ("unknown-model", CHAT, chat(model="no-such-model"), 404, IRE, "model"),
    ("temperature-string", CHAT, chat(temperature="hot"), 400, IRE, "temperature"),
    ("temperature-too-high", CHAT, chat(temperature=3), 400, IRE, "temperature"),
    ("temperature-negative", CHAT, chat(temperature=-0.1), 400, IRE, "temperature"),
    ("top-p-zero", CHAT, chat(top_p=0), 400, IRE, "top_p"),
    ("top-p-above-one", CHAT, chat(top_p=1.5), 400, IRE, "top_p"),
    ("n-zero", CHAT, chat(n=0), 400, IRE, "n"),
    ("n-string", CHAT, chat(n="2"), 400, IRE, "n"),
    ("n-huge", CHAT, chat(n=1000), 400, IRE, "n"),
    ("max-tokens-zero", CHAT, chat(max_tokens=0), 400, IRE, "max_tokens"),
    ("max-tokens-negative", CHAT, chat(max_tokens=-5), 400, IRE, "max_tokens"),
    ("max-tokens-string", CHAT, chat(max_tokens="10"), 400, IRE, "max_tokens"),
    ("max-tokens-float", CHAT, chat(max_tokens=1.5), 400, IRE, "max_tokens"),
    ("max-tokens-over-limit", CHAT, chat(max_tokens=100_000), 400, IRE, "max_tokens"),
    ("max-completion-tokens-over-limit", CHAT, chat(max_completion_tokens=100_000), 400, IRE,
     "max_completion_tokens"),
    ("stream-string", CHAT, chat(stream="yes"), 400, IRE, "stream"),
    ("stream-options-string", CHAT, chat(stream_options="usage"), 400, IRE, "stream_options"),
    ("include-usage-string", CHAT, chat(stream_options={"include_usage": "yes"}), 400, IRE,
     "stream_options.include_usage"),
    ("stop-int", CHAT, chat(stop=5), 400, IRE, "stop"),
    ("stop-list-of-ints", CHAT, chat(stop=[1, 2]), 400, IRE, "stop"),
    ("stop-too-many", CHAT, chat(stop=[str(i) for i in range(17)]), 400, IRE, "stop"),
    ("logprobs-string", CHAT, chat(logprobs="true"), 400, IRE, "logprobs"),
    ("top-logprobs-too-many", CHAT, chat(logprobs=True, top_logprobs=21), 400, IRE, "top_logprobs"),
    ("top-logprobs-without-logprobs", CHAT, chat(top_logprobs=2), 400, IRE, "top_logprobs"),
    ("presence-penalty-range", CHAT, chat(presence_penalty=3), 400, IRE, "presence_penalty"),
    ("frequency-penalty-range", CHAT, chat(frequency_penalty=-3), 400, IRE, "frequency_penalty"),
    ("seed-string", CHAT, chat(seed="1"), 400, IRE, "seed"),
    ("seed-float", CHAT, chat(seed=1.5), 400, IRE, "seed"),
    ("top-k-below-minus-one", CHAT, chat(top_k=-2), 400, IRE, "top_k"),
    ("min-p-above-one", CHAT, chat(min_p=2), 400, IRE, "min_p"),
    ("repetition-penalty-zero", CHAT, chat(repetition_penalty=0), 400, IRE, "repetition_penalty"),
    ("min-tokens-negative", CHAT, chat(min_tokens=-1), 400, IRE, "min_tokens"),
    ("min-tokens-over-max", CHAT, chat(min_tokens=10, max_tokens=5), 400, IRE, "min_tokens"),
    ("ignore-eos-string", CHAT, chat(ignore_eos="no"), 400, IRE, "ignore_eos"),
    ("stop-token-ids-strings", CHAT, chat(stop_token_ids=["a"]), 400, IRE, "stop_token_ids[0]"),
    ("logit-bias-list", CHAT, chat(logit_bias=[1]), 400, IRE, "logit_bias"),
    ("tools-object", CHAT, chat(tools={"type": "function"}), 400, IRE, "tools"),
    ("completion-missing-prompt", COMP, {"model": "fake"}, 400, IRE, "prompt"),
    ("completion-prompt-int", COMP, comp(prompt=5), 400, IRE, "prompt"),
    ("completion-prompt-empty", COMP, comp(prompt=""), 400, IRE, "prompt"),
    ("completion-max-tokens-zero-without-echo", COMP, comp(max_tokens=0), 400, IRE, "max_tokens"),
    ("completion-max-tokens-negative", COMP, comp(max_tokens=-1, echo=True), 400, IRE, "max_tokens"),
    ("completion-too-many-prompts", COMP, comp(prompt=["a"] * 257), 400, IRE, "prompt"),
    ("completion-batched-empty-prompt", COMP, comp(prompt=["a", ""]), 400, IRE, "prompt[1]"),
    ("completion-batched-empty-token-list", COMP, comp(prompt=[[1, 2], []]), 400, IRE, "prompt[1]"),
    ("completion-prompt-logprobs-stream", COMP, comp(prompt_logprobs=1, stream=True), 400, IRE, "prompt_logprobs"),
    ("completion-prompt-logprobs-too-many", COMP, comp(prompt_logprobs=21), 400, IRE, "prompt_logprobs"),
    ("stream-options-without-stream", CHAT, chat(stream_options={"include_usage": True}), 400, IRE,
     "stream_options"),
    ("stream-options-stream-false", COMP, comp(stream=False, stream_options={"include_usage": True}), 400, IRE,
     "stream_options"),
    ("logit-bias-word-key", CHAT, chat(logit_bias={"hello": 1}), 400, IRE, "logit_bias"),
    ("logit-bias-negative-key", CHAT, chat(logit_bias={"-5": 1}), 400, IRE, "logit_bias"),
    ("logit-bias-float-key", COMP, comp(logit_bias={"5.0": 1}), 400, IRE, "logit_bias"),
    # Digits int() refuses: a superscript (str.isdigit says yes) and one past its 4,300-digit cap.
    ("logit-bias-superscript-key", CHAT, chat(logit_bias={"\u00b2": 1}), 400, IRE, "logit_bias"),
    ("logit-bias-5000-digit-key", CHAT, chat(logit_bias={"1" * 5000: 1}), 400, IRE, "logit_bias"),
    ("seed-over-int64", CHAT, chat(seed=2**63), 400, IRE, "seed"),
    ("seed-under-int64", CHAT, b'{"model": "fake", "messages": [{"role": "user", "content": "hi"}], '
     b'"seed": -9223372036854775809}', 400, IRE, "seed"),
    ("continue-final-with-generation-prompt", CHAT, chat(continue_final_message=True), 400, IRE,
     "continue_final_message"),
    ("verbosity-unknown", CHAT, chat(verbosity="extreme"), 400, IRE, "verbosity"),
    ("completion-logprobs-too-many", COMP, comp(logprobs=21), 400, IRE, "logprobs"),
    ("completion-logprobs-bool", COMP, comp(logprobs=True), 400, IRE, "logprobs"),
    ("completion-messages-field", COMP, comp(messages=M), 400, IRE, "messages"),
    ("completion-echo-string", COMP, comp(echo="x"), 400, IRE, "echo"),
    ("completion-best-of-zero", COMP, comp(best_of=0), 400, IRE, "best_of"),
    ("completion-max-tokens-over-limit", COMP, comp(max_tokens=10**6), 400, IRE, "max_tokens"),
    ("completion-unknown-model", COMP, comp(model="nope"), 404, IRE, "model"),
    ("upstream-rejects", CHAT, chat(user="fail=400"), 400, IRE, "temperature"),
]


@pytest.fixture(scope="module")
def http(gateway: LiveServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=gateway.url, timeout=10) as client:
        yield client


@pytest.mark.parametrize(("path", "body", "status", "etype", "param"), [c[1:] for c in CORPUS],
                         ids=[c[0] for c in CORPUS])
def test_malformed(http: httpx.Client, path: str, body: Any, status: int, etype: str, param: str | None) -> None:
    content = body if isinstance(body, bytes) else orjson.dumps(body)
    resp = http.post(path, content=content, headers={"content-type": "application/json"})
    assert resp.status_code == status, resp.text
    assert resp.headers["content-type"] == "application/json"
    err = resp.json()["error"]
    assert err["type"] == etype
    assert err["param"] == param
    assert isinstance(err["message"], str) and err["message"]
    assert "code" in err


def test_corpus_is_large_enough() -> None:
    assert len(CORPUS) >= 50


def test_unknown_argument_wording(http: httpx.Client) -> None:
    resp = http.post(CHAT, json=chat(frobnicate=True))
    assert resp.json()["error"]["message"] == "Unrecognized request argument supplied: frobnicate"


@pytest.mark.parametrize(("method", "path", "status"), [("GET", "/v1/nope", 404), ("GET", CHAT, 405),
                                                        ("DELETE", "/v1/models", 405)])
def test_unknown_routes_are_json(http: httpx.Client, method: str, path: str, status: int) -> None:
    resp = http.request(method, path)
    assert resp.status_code == status
    assert resp.json()["error"]["type"] == IRE
