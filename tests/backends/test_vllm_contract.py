"""``openai_http`` against vLLM's OpenAI-server behaviours (formats reproduced by
tests/backends/vllm_format_server.py, which cites where each comes from): streaming chunks,
the usage chunk with ``stream_options``, both error-body shapes and their status codes, an
error in the middle of a stream, and Blink's /metrics speaking vLLM's series names. Through
the gateway, with the real openai client."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import httpx
import openai
import pytest
from live_server import LiveServer
from vllm_format_server import MODEL, PROMPT_TOKENS, TOKENS, VllmFormatServer

from blink.config import ModelSettings, ServerSettings, Settings
from blink.serve import build_app

MSGS = [{"role": "user", "content": "What colour is the sky?"}]


@pytest.fixture(scope="module", params=["flat", "nested"])
def vllm(request: pytest.FixtureRequest) -> Iterator[tuple[VllmFormatServer, LiveServer]]:
    server = VllmFormatServer(request.param)
    with LiveServer(server) as live:
        yield server, live


@pytest.fixture(scope="module")
def gateway(vllm: tuple[VllmFormatServer, LiveServer]) -> Iterator[LiveServer]:
    model = ModelSettings(name="llama", kind="openai_http", base_url=f"{vllm[1].url}/v1", upstream_model=MODEL)
    with LiveServer(build_app(Settings(server=ServerSettings(), models=[model]))) as gw:
        yield gw


def _client(gw: LiveServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gw.url}/v1", api_key="x", max_retries=0)


def test_stream_text_and_usage_chunk(gateway: LiveServer, vllm: tuple[VllmFormatServer, LiveServer]) -> None:
    stream = _client(gateway).chat.completions.create(
        model="llama", messages=MSGS, stream=True, stream_options={"include_usage": True}  # type: ignore[arg-type]
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "".join(TOKENS)
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["stop"]
    usage = chunks[-1].usage
    assert not chunks[-1].choices and usage is not None  # the usage chunk comes last, with no choices
    assert (usage.prompt_tokens, usage.completion_tokens) == (PROMPT_TOKENS, len(TOKENS))
    assert vllm[0].requests[-1]["model"] == MODEL  # the upstream's model id, not the served name


def test_non_streamed_usage(gateway: LiveServer) -> None:
    out = _client(gateway).chat.completions.create(model="llama", messages=MSGS)  # type: ignore[arg-type]
    assert out.choices[0].message.content == "".join(TOKENS)
    assert out.usage is not None and out.usage.prompt_tokens == PROMPT_TOKENS


def test_context_length_error_keeps_status_and_message(gateway: LiveServer) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        _client(gateway).chat.completions.create(model="llama", messages=MSGS, user="long")  # type: ignore[arg-type]
    err = info.value
    assert err.status_code == 400
    assert "maximum context length is 2048 tokens" in err.message
    assert "{" not in err.message  # the message, not the raw error body
    assert err.body["type"] == "BadRequestError"  # type: ignore[index]


def test_unknown_upstream_model_is_404(vllm: tuple[VllmFormatServer, LiveServer]) -> None:
    model = ModelSettings(name="gone", kind="openai_http", base_url=f"{vllm[1].url}/v1", upstream_model="nope")
    with LiveServer(build_app(Settings(server=ServerSettings(), models=[model]))) as gw:
        with pytest.raises(openai.NotFoundError) as info:
            _client(gw).chat.completions.create(model="gone", messages=MSGS)  # type: ignore[arg-type]
    assert "does not exist" in info.value.message


def test_error_event_mid_stream_ends_the_stream_with_an_error(gateway: LiveServer) -> None:
    r = httpx.post(f"{gateway.url}/v1/chat/completions", timeout=10, json={
        "model": "llama", "messages": MSGS, "stream": True, "user": "error_mid"})
    events = [line[6:] for line in r.text.splitlines() if line.startswith("data: ")]
    assert r.status_code == 200 and " The" in r.text  # the first tokens were already sent
    assert any('"error"' in e for e in events)  # then an explicit error event, not a silent end
    assert "EngineCore encountered an issue" in r.text


def test_gateway_metrics_use_vllm_names(gateway: LiveServer, vllm: tuple[VllmFormatServer, LiveServer]) -> None:
    _client(gateway).chat.completions.create(model="llama", messages=MSGS)  # type: ignore[arg-type]
    series = re.compile(r"^(vllm:[a-z0-9_]+?)(?:_bucket|_count|_sum|_created)?\{", re.M)
    shared = {"vllm:time_to_first_token_seconds", "vllm:e2e_request_latency_seconds", "vllm:prompt_tokens_total",
              "vllm:generation_tokens_total", "vllm:request_success_total"}
    theirs = set(series.findall(httpx.get(f"{vllm[1].url}/metrics").text))
    assert shared <= theirs
    deadline = time.monotonic() + 5  # a request is recorded just after its last byte
    while not shared <= (ours := set(series.findall(httpx.get(f"{gateway.url}/metrics").text))):
        assert time.monotonic() < deadline, shared - ours
        time.sleep(0.05)
    assert 'model_name="llama"' in httpx.get(f"{gateway.url}/metrics").text


def test_health_and_models(vllm: tuple[VllmFormatServer, LiveServer]) -> None:
    assert httpx.get(f"{vllm[1].url}/health").status_code == 200
    assert httpx.get(f"{vllm[1].url}/v1/models").json()["data"][0]["id"] == MODEL
