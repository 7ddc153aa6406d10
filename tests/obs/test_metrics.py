"""/metrics over a real socket after real requests: vLLM-named histograms, counters, gauges."""

from __future__ import annotations

import subprocess
from typing import Any

import httpx
import openai
import pytest
from live_server import LiveServer
from prometheus_client.parser import text_string_to_metric_families
from system_tools import require

from blink.backends.base import Load
from blink.obs.metrics import SERIES_DOC, GatewayMetrics
from blink.obs.observer import Observability


def scrape(url: str) -> dict[str, list[Any]]:
    text = httpx.get(f"{url}/metrics").text
    samples: dict[str, list[Any]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples.setdefault(s.name, []).append(s)
    return samples


def value(samples: dict[str, list[Any]], name: str, **labels: str) -> float:
    return sum(s.value for s in samples.get(name, []) if all(s.labels.get(k) == v for k, v in labels.items()))


@pytest.fixture
def client(obs_gateway: LiveServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{obs_gateway.url}/v1", api_key="x", max_retries=0)


def test_streamed_request_fills_latency_histograms_and_counters(client: openai.OpenAI, obs_gateway: LiveServer) -> None:
    before = scrape(obs_gateway.url)
    stream = client.chat.completions.create(model="fake", messages=[{"role": "user", "content": "hi"}], stream=True,
                                            stream_options={"include_usage": True})
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == "".join(f" t{k}" for k in range(8))
    after = scrape(obs_gateway.url)

    def delta(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    labels = {"model_name": "fake", "backend": "fake", "route": "chat", "tier": "default"}
    assert delta("vllm:time_to_first_token_seconds_count", **labels) == 1
    assert delta("vllm:e2e_request_latency_seconds_count", **labels) == 1
    assert delta("vllm:request_queue_time_seconds_count", **labels) == 1
    assert delta("vllm:request_time_per_output_token_seconds_count", **labels) == 1
    # 8 token deltas -> 7 gaps between them.
    assert delta("vllm:inter_token_latency_seconds_count", **labels) == 7
    assert delta("vllm:generation_tokens_total", model_name="fake") == 8
    assert delta("vllm:prompt_tokens_total", model_name="fake") > 0
    assert delta("blink_requests_total", model_name="fake", route="chat", status="200") == 1
    assert delta("vllm:request_success_total", model_name="fake", finished_reason="stop") == 1
    for stage in ("parse", "resolve", "backend_ttft", "stream"):
        assert delta("blink_stage_duration_seconds_count", stage=stage, model_name="fake") == 1, stage
    ttft_sum = delta("vllm:time_to_first_token_seconds_sum", **labels)
    e2e_sum = delta("vllm:e2e_request_latency_seconds_sum", **labels)
    assert 0 < ttft_sum <= e2e_sum


def test_errors_and_disconnects_are_counted_by_status(client: openai.OpenAI, obs_gateway: LiveServer) -> None:
    before = scrape(obs_gateway.url)
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="nope", messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="fake", messages=[{"role": "user", "content": "hi"}], user="fail=400")
    after = scrape(obs_gateway.url)
    assert value(after, "blink_requests_total", status="404") - value(before, "blink_requests_total", status="404") == 1
    assert value(after, "blink_requests_total", model_name="fake", status="400") - value(
        before, "blink_requests_total", model_name="fake", status="400") == 1


def test_label_values_never_come_from_client_text(client: openai.OpenAI, obs_gateway: LiveServer) -> None:
    """An unknown model's name and an x-blink-tier header the model has no tiers for are the
    client's text: as labels, each distinct value would add ~90 series for as long as the process
    lives (an unbounded registry and /metrics). They are counted under the empty model and the
    default tier."""
    for i in range(3):
        with pytest.raises(openai.NotFoundError):
            client.chat.completions.create(model=f"probe-model-{i}", messages=[{"role": "user", "content": "hi"}])
        client.chat.completions.create(model="fake", messages=[{"role": "user", "content": "hi"}],
                                       extra_headers={"x-blink-tier": f"probe-tier-{i}"})
    text = httpx.get(f"{obs_gateway.url}/metrics").text
    assert "probe-model-" not in text and "probe-tier-" not in text
    assert value(scrape(obs_gateway.url), "blink_requests_total", model_name="", status="404") >= 3


def test_mid_stream_error_is_recorded_with_its_status(client: openai.OpenAI, obs_gateway: LiveServer) -> None:
    before = scrape(obs_gateway.url)
    with pytest.raises(openai.APIError):
        for _ in client.chat.completions.create(model="fake", messages=[{"role": "user", "content": "hi"}],
                                                stream=True, user="error_after=3"):
            pass
    after = scrape(obs_gateway.url)
    ok = value(after, "blink_requests_total", model_name="fake", status="200") - value(
        before, "blink_requests_total", model_name="fake", status="200")
    failed = sum(value(after, "blink_requests_total", model_name="fake", status=s)
                 - value(before, "blink_requests_total", model_name="fake", status=s) for s in ("500", "502"))
    assert ok == 0 and failed == 1


def test_engine_gauges_are_read_at_scrape_time() -> None:
    load = Load(running=3, waiting=1, kv_usage=0.25, prefix_cache_hit_rate=None)
    reads = 0

    def loads() -> list[tuple[str, Load]]:
        nonlocal reads
        reads += 1
        return [("small", load)]

    metrics = GatewayMetrics(loads)
    assert reads == 0  # registering describes the series without reading backends
    text = metrics.render().decode()
    load.running = 5
    text2 = metrics.render().decode()
    assert reads == 2
    assert 'vllm:num_requests_running{model_name="small"} 3.0' in text
    assert 'vllm:num_requests_running{model_name="small"} 5.0' in text2
    assert 'vllm:kv_cache_usage_perc{model_name="small"} 0.25' in text
    # An unreported value produces no sample rather than a misleading zero.
    assert 'blink_prefix_cache_hit_rate{' not in text


def test_out_of_request_events_and_misspelt_labels() -> None:
    obs = Observability()
    obs.event("breaker_transition", backend="b1", state="open")
    text = obs.metrics.render().decode()
    assert 'blink_breaker_transitions_total{backend="b1",state="open"} 1.0' in text
    assert obs.live is not None and obs.live.breakers == {"b1": "open"}
    with pytest.raises(ValueError, match="takes labels"):
        obs.event("hedge", result="won")


def test_every_series_is_documented() -> None:
    text = GatewayMetrics(lambda: [("m", Load(running=1, waiting=0, kv_usage=0.1, prefix_cache_hit_rate=0.5))]).render()
    # prometheus-client's ``*_created`` timestamps are not series of their own.
    names = {f.name for f in text_string_to_metric_families(text.decode()) if not f.name.endswith("_created")}
    for name in names:
        assert f"`{name}" in SERIES_DOC or f"/ `{name}`" in SERIES_DOC, name


def test_promtool_accepts_the_scrape(client: openai.OpenAI, obs_gateway: LiveServer) -> None:
    promtool = require("promtool")
    client.chat.completions.create(model="fake", messages=[{"role": "user", "content": "hi"}])
    text = httpx.get(f"{obs_gateway.url}/metrics").text
    proc = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=30)
    # promtool exits 1 for style lints (e.g. colons in vLLM's names); parse errors are what must not appear.
    assert "error while linting" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr


def test_client_disconnect_is_recorded_as_499(obs_gateway: LiveServer) -> None:
    import time

    before = scrape(obs_gateway.url)
    body = {"model": "fake", "messages": [{"role": "user", "content": "hi"}], "stream": True, "user": "delay=0.2"}
    with httpx.stream("POST", f"{obs_gateway.url}/v1/chat/completions", json=body, timeout=10) as resp:
        for _ in resp.iter_bytes():
            break  # first chunk arrived: hang up mid-stream
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        after = scrape(obs_gateway.url)
        if value(after, "blink_client_disconnects_total") > value(before, "blink_client_disconnects_total"):
            break
        time.sleep(0.05)
    assert value(after, "blink_requests_total", status="499") - value(before, "blink_requests_total", status="499") == 1
    assert value(after, "blink_requests_in_flight") == 0


def test_readme_lists_the_series_table() -> None:
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    assert SERIES_DOC in readme
