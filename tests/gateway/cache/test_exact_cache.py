"""Exact cache through a real gateway: hits, misses, opt-outs, streams, restarts."""

from __future__ import annotations

from pathlib import Path

import httpx
import openai
import pytest
from cache_helpers import wait_entries
from gateway_helpers import cached_settings, serving
from upstream_server import FakeUpstream

TOKENS = "".join(f" t{k}" for k in range(8))
MSGS = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture
def exact_settings(upstream: FakeUpstream, tmp_path: Path):  # type: ignore[no-untyped-def]
    return cached_settings(upstream, {"exact": {"enabled": True}, "path": str(tmp_path / "cache.db")})


def _post(url: str, body: dict, headers: dict | None = None) -> httpx.Response:  # type: ignore[type-arg]
    return httpx.post(f"{url}/v1/chat/completions", json={"model": "fake", **body}, headers=headers or {}, timeout=30)


def test_second_identical_request_is_an_exact_hit(upstream: FakeUpstream, exact_settings) -> None:  # type: ignore[no-untyped-def]
    with serving(exact_settings) as (server, app):
        before = len(upstream.requests)
        first = _post(server.url, {"messages": MSGS, "temperature": 0})
        assert first.headers["x-blink-cache"] == "miss"
        wait_entries(app, 1)
        # Whitespace differences normalise away; `user` does not change the output.
        msgs = [MSGS[0], {"role": "user", "content": "  What is the capital of  France? "}]
        second = _post(server.url, {"messages": msgs, "temperature": 0, "user": "someone"})
        assert second.status_code == 200
        assert second.headers["x-blink-cache"] == "exact"
        assert len(upstream.requests) == before + 1
        a, b = first.json(), second.json()
        assert b["choices"][0]["message"]["content"] == a["choices"][0]["message"]["content"] == TOKENS
        assert b["id"] != a["id"] and b["usage"]["completion_tokens"] == a["usage"]["completion_tokens"]


@pytest.mark.parametrize(
    "change",
    [
        {"messages": [{"role": "system", "content": "Be verbose."}, MSGS[1]], "temperature": 0},
        {"temperature": 0, "max_tokens": 5},
        {"temperature": 0, "top_p": 0.5},
        {"seed": 7, "temperature": 0.7},
        {"temperature": 0, "stop": ["t3"]},
    ],
)
def test_anything_that_changes_the_output_misses(upstream: FakeUpstream, exact_settings, change: dict) -> None:  # type: ignore[no-untyped-def,type-arg]
    with serving(exact_settings) as (server, app):
        _post(server.url, {"messages": MSGS, "temperature": 0})
        wait_entries(app, 1)
        resp = _post(server.url, {"messages": MSGS, **change})
        assert resp.status_code == 200
        assert resp.headers["x-blink-cache"] == "miss"


def test_non_deterministic_requests_bypass(upstream: FakeUpstream, exact_settings) -> None:  # type: ignore[no-untyped-def]
    with serving(exact_settings) as (server, _app):
        for _ in range(2):
            resp = _post(server.url, {"messages": MSGS, "temperature": 0.8})
            assert resp.headers["x-blink-cache"] == "bypass"


def test_logit_bias_and_neutral_identifiers_key_the_cache_as_they_should(upstream: FakeUpstream, exact_settings) -> None:  # type: ignore[no-untyped-def]
    with serving(exact_settings) as (server, app):
        _post(server.url, {"messages": MSGS, "temperature": 0})
        wait_entries(app, 1)
        neutral = {"prompt_cache_key": "k", "safety_identifier": "s", "temperature": 0}
        assert _post(server.url, {"messages": MSGS, **neutral}).headers["x-blink-cache"] == "exact"
        biased = _post(server.url, {"messages": MSGS, "temperature": 0, "logit_bias": {"5": 100}})
        assert biased.headers["x-blink-cache"] == "miss"


def test_batched_prompts_and_continuous_usage_bypass(upstream: FakeUpstream, exact_settings) -> None:  # type: ignore[no-untyped-def]
    """Entries describe one prompt and hold no per-token counts: such requests never use them."""
    with serving(exact_settings) as (server, _app):
        for _ in range(2):
            batched = httpx.post(f"{server.url}/v1/completions", timeout=30,
                                 json={"model": "fake", "prompt": ["a", "b"], "temperature": 0, "max_tokens": 2})
            assert batched.status_code == 200 and batched.headers["x-blink-cache"] == "bypass"
            streamed = _post(server.url, {"messages": MSGS, "temperature": 0, "stream": True,
                                          "stream_options": {"continuous_usage_stats": True}})
            assert streamed.status_code == 200 and streamed.headers["x-blink-cache"] == "bypass"


def test_cache_false_and_no_cache_header(upstream: FakeUpstream, exact_settings) -> None:  # type: ignore[no-untyped-def]
    with serving(exact_settings) as (server, app):
        _post(server.url, {"messages": MSGS, "temperature": 0})
        wait_entries(app, 1)
        before = len(upstream.requests)
        assert _post(server.url, {"messages": MSGS, "temperature": 0, "cache": False}).headers["x-blink-cache"] == "bypass"
        no_cache = _post(server.url, {"messages": MSGS, "temperature": 0}, {"cache-control": "no-cache"})
        assert no_cache.headers["x-blink-cache"] == "bypass"
        assert len(upstream.requests) == before + 2
        # `cache` is Blink's field: it never reaches the upstream.
        assert "cache" not in upstream.requests[-2]
        assert _post(server.url, {"messages": MSGS, "temperature": 0}).headers["x-blink-cache"] == "exact"


def test_stream_fill_then_sse_replay_with_the_openai_client(upstream: FakeUpstream, exact_settings) -> None:  # type: ignore[no-untyped-def]
    with serving(exact_settings) as (server, app):
        client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0)

        def run() -> tuple[str, str, object, list]:  # type: ignore[type-arg]
            raw = client.chat.completions.with_raw_response.create(
                model="fake", messages=MSGS, temperature=0, stream=True, stream_options={"include_usage": True}
            )
            chunks = list(raw.parse())
            text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            return raw.headers["x-blink-cache"], text, chunks[-1].usage, chunks

        outcome, text, usage, _ = run()
        assert outcome == "miss" and text == TOKENS
        wait_entries(app, 1)
        outcome2, text2, usage2, chunks = run()
        assert outcome2 == "exact" and text2 == TOKENS
        assert usage2 is not None and usage is not None and usage2.completion_tokens == usage.completion_tokens
        assert chunks[0].choices[0].delta.role == "assistant"
        assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
        # A non-streamed request for the same thing is served from the streamed fill.
        assert _post(server.url, {"messages": MSGS, "temperature": 0}).json()["choices"][0]["message"]["content"] == TOKENS


def test_raw_sse_replay_ends_with_done(upstream: FakeUpstream, exact_settings) -> None:  # type: ignore[no-untyped-def]
    with serving(exact_settings) as (server, app):
        _post(server.url, {"messages": MSGS, "temperature": 0, "stream": True})
        wait_entries(app, 1)
        resp = _post(server.url, {"messages": MSGS, "temperature": 0, "stream": True})
        assert resp.headers["x-blink-cache"] == "exact"
        assert resp.headers["content-type"].startswith("text/event-stream")
        assert resp.text.endswith("data: [DONE]\n\n")
        assert resp.text.count("chat.completion.chunk") == 2


def test_completions_endpoint_is_cached_too(upstream: FakeUpstream, exact_settings) -> None:  # type: ignore[no-untyped-def]
    with serving(exact_settings) as (server, app):
        body = {"model": "fake", "prompt": "Once upon a time", "temperature": 0}
        first = httpx.post(f"{server.url}/v1/completions", json=body)
        wait_entries(app, 1)
        second = httpx.post(f"{server.url}/v1/completions", json=body)
        assert second.headers["x-blink-cache"] == "exact"
        assert second.json()["choices"][0]["text"] == first.json()["choices"][0]["text"]
        assert second.json()["object"] == "text_completion"


def test_entries_survive_a_restart(upstream: FakeUpstream, exact_settings) -> None:  # type: ignore[no-untyped-def]
    with serving(exact_settings) as (server, app):
        _post(server.url, {"messages": MSGS, "temperature": 0})
        wait_entries(app, 1)
    with serving(exact_settings) as (server, _app):
        assert _post(server.url, {"messages": MSGS, "temperature": 0}).headers["x-blink-cache"] == "exact"


def test_failed_generations_are_not_cached(upstream: FakeUpstream, exact_settings) -> None:  # type: ignore[no-untyped-def]
    with serving(exact_settings) as (server, app):
        resp = _post(server.url, {"messages": MSGS, "temperature": 0, "stream": True, "user": "error_after=3"})
        assert "upstream failed mid-stream" in resp.text
        assert _post(server.url, {"messages": MSGS, "temperature": 0, "user": "fail=500"}).status_code >= 500
        assert _post(server.url, {"messages": MSGS, "temperature": 0}).headers["x-blink-cache"] == "miss"
