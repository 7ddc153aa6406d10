"""Semantic cache + classifier routing on one gateway: one batched encoder, one embedding per request."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from live_server import LiveServer
from upstream_server import FakeUpstream

from blink.config.models import OpenAIHTTPModel
from blink.config.settings import Settings
from blink.serve import build_app


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeUpstream]:
    up = FakeUpstream(tokens=4)
    with LiveServer(up) as server:
        up.base_url = f"{server.url}/v1"
        yield up


def test_cache_and_router_share_one_embedding(upstream: FakeUpstream, onnx_dir: Path) -> None:
    models = [OpenAIHTTPModel(name=n, kind="openai_http", base_url=upstream.base_url) for n in ("small", "large")]
    settings = Settings(
        models=models,
        routes=[{"name": "auto", "tiers": [{"name": "small", "replicas": ["small"]}, {"name": "large", "replicas": ["large"]}],
                 "policies": ["classifier"], "classifier": {"labels": {"simple": "small", "complex": "large"}}}],
        cache={"exact": {"enabled": True}, "semantic": {"enabled": True, "onnx_dir": str(onnx_dir), "quantize": False},
               "store": "memory"},
    )  # fmt: skip
    app = build_app(settings)
    encoder = app.state.model_server.get("all-MiniLM-L6-v2", "encoder")
    with LiveServer(app) as server:
        client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0)
        before = encoder.batcher.stats.items  # the classifier's examples were embedded at start-up
        for i, prompt in enumerate(["hi there, how are you?", "prove the spectral theorem for compact operators"]):
            raw = client.chat.completions.with_raw_response.create(
                model="auto", messages=[{"role": "user", "content": prompt}], temperature=0)
            assert raw.headers["x-blink-cache"] == "miss" and raw.parse().choices[0].message.content
            assert encoder.batcher.stats.items == before + i + 1  # cache and router: one embedding
        assert before > 0  # the router's centroids came from the same batched encoder
