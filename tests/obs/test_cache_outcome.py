"""Cache outcomes reach the metrics and the log through the response cache's ``x-blink-cache``
header, and a replayed answer gets a TTFT even though no backend produced it."""

from __future__ import annotations

import io
import time
from collections.abc import Iterator

import httpx
import openai
import orjson
import pytest
from live_server import LiveServer
from upstream_server import FakeUpstream

from blink.config.gateway import CacheSettings, ExactCacheSettings, ObsSettings
from blink.config.models import OpenAIHTTPModel
from blink.config.settings import Settings
from blink.obs.request_log import RequestLogger
from blink.serve import build_app


@pytest.fixture(scope="module")
def cached_gateway(obs_upstream: FakeUpstream) -> Iterator[tuple[str, io.StringIO]]:
    settings = Settings(
        models=[OpenAIHTTPModel(name="fake", kind="openai_http", base_url=obs_upstream.base_url)],
        cache=CacheSettings(exact=ExactCacheSettings(enabled=True), store="memory"),
        obs=ObsSettings(request_log="off"),
    )
    app = build_app(settings)
    log = io.StringIO()
    app.state.obs.request_log = RequestLogger(log)
    with LiveServer(app) as server:
        yield server.url, log


def test_exact_hit_is_counted_and_timed(cached_gateway: tuple[str, io.StringIO]) -> None:
    url, log = cached_gateway
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0)
    msgs = [{"role": "user", "content": "same question"}]
    ids = []
    for _ in range(3):
        chunks = list(client.chat.completions.create(model="fake", messages=msgs, temperature=0, stream=True))
        ids.append(chunks[0].id)
        time.sleep(0.2)  # the cache fill runs after the stream
    deadline = time.monotonic() + 10  # the request log is written after the stream too
    while len(log.getvalue().splitlines()) < len(ids) and time.monotonic() < deadline:
        time.sleep(0.05)
    records = [orjson.loads(line) for line in log.getvalue().splitlines()]
    # A replayed hit is logged under the id its response carries, as a miss is.
    assert [r["request_id"] for r in records] == ids and all(ids)
    assert [r["cache"] for r in records][0] == "miss"
    hits = [r for r in records if r["cache"] == "exact"]
    assert hits and all(r["status"] == 200 and r["ttft_ms"] is not None for r in hits)
    metrics = httpx.get(f"{url}/metrics").text
    assert 'blink_cache_requests_total{outcome="exact"}' in metrics
    misses = sum(r["cache"] == "miss" for r in records)  # 1, unless a fill lagged behind the next ask
    assert f'blink_cache_requests_total{{outcome="miss"}} {float(misses)}' in metrics
