"""Engine gauges on /metrics come from the embedded engine's live stats, read at scrape time."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
from live_server import LiveServer
from prometheus_client.parser import text_string_to_metric_families

from blink.config.gateway import ObsSettings
from blink.config.models import EmbeddedModel
from blink.config.server import ServerSettings
from blink.config.settings import Settings
from blink.serve import build_app

MODEL = "tiny"


@pytest.fixture(scope="module")
def embedded_gateway(tiny_llama: Path) -> Iterator[str]:
    settings = Settings(
        server=ServerSettings(max_concurrent_streams=8),
        models=[EmbeddedModel(name=MODEL, kind="embedded", model=str(tiny_llama), dtype="float32", threads=1,
                              max_model_len=256)],
        obs=ObsSettings(request_log="off"),
    )
    with LiveServer(build_app(settings)) as server:
        yield server.url


def _gauges(url: str) -> dict[str, float]:
    out = {}
    for family in text_string_to_metric_families(httpx.get(f"{url}/metrics").text):
        for s in family.samples:
            if family.type == "gauge" and s.labels.get("model_name") == MODEL:
                out[s.name] = s.value
    return out


def test_engine_gauges_follow_the_engine(embedded_gateway: str) -> None:
    idle = _gauges(embedded_gateway)
    assert idle["vllm:num_requests_running"] == 0 and idle["vllm:num_requests_waiting"] == 0
    assert 0 <= idle["vllm:kv_cache_usage_perc"] <= 1 and "blink_engine_batch_size" in idle
    assert "blink_spec_decode_acceptance_rate" not in idle  # speculation is off: no sample, not a zero

    client = openai.OpenAI(base_url=f"{embedded_gateway}/v1", api_key="x", max_retries=0)
    peak: dict[str, float] = {}
    done = threading.Event()

    def scrape_while_running() -> None:
        # Engine stats reach the gateway once per engine step; scrape until the request ends.
        while not done.wait(0.01):
            for name, v in _gauges(embedded_gateway).items():
                peak[name] = max(peak.get(name, 0.0), v)

    scraper = threading.Thread(target=scrape_while_running)
    scraper.start()
    try:
        list(client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "count"}],
                                            max_tokens=200, temperature=0, stream=True,
                                            extra_body={"ignore_eos": True}))
    finally:
        done.set()
        scraper.join(timeout=30)
    assert peak["vllm:num_requests_running"] == 1
    assert peak["vllm:kv_cache_usage_perc"] > 0
    assert peak["blink_engine_batch_size"] >= 1
    text = httpx.get(f"{embedded_gateway}/metrics").text
    assert 'vllm:generation_tokens_total{model_name="tiny"} 200.0' in text
