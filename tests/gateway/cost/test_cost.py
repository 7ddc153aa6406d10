"""Cost accounting through a real gateway: x-blink-cost-usd, the request log's cost_usd, spend
counters per key and model, cache hits as savings, and monthly budgets (429 budget_exceeded)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import orjson
import pytest
from live_server import LiveServer
from upstream_server import FakeUpstream

from blink.backends.base import Usage
from blink.config.batch import BatchSettings
from blink.config.cost import CostSettings, ModelPrice
from blink.config.gateway import CacheSettings, ExactCacheSettings, ObsSettings
from blink.config.models import OpenAIHTTPModel
from blink.config.server import ServerSettings
from blink.config.settings import Settings
from blink.gateway.cost.ledger import read_usage
from blink.gateway.cost.prices import PriceTable
from blink.serve import build_app

# Deliberately large prices so a few tokens give a cost well above the header's resolution.
PRICE = ModelPrice(input=1000.0, output=3000.0, cached_input=250.0)


def test_price_table_splits_cached_input() -> None:
    table = PriceTable({"m": PRICE})
    cost = table.cost_usd("m", Usage(prompt_tokens=100, completion_tokens=10, cached_tokens=40))
    assert cost == pytest.approx((60 * 1000 + 40 * 250 + 10 * 3000) / 1e6)
    assert table.cost_usd("unpriced", Usage(prompt_tokens=100, completion_tokens=10)) == 0.0
    no_cached_price = PriceTable({"m": ModelPrice(input=2.0, output=4.0)})
    assert no_cached_price.cost_usd("m", Usage(1_000_000, 0, 500_000)) == pytest.approx(2.0)


def _settings(upstream: FakeUpstream, tmp: Path, budget: float | None = None, cache: bool = False) -> Settings:
    return Settings(
        server=ServerSettings(),
        models=[OpenAIHTTPModel(name="fake", kind="openai_http", base_url=upstream.base_url, read_timeout_s=30)],
        cost=CostSettings(prices={"fake": PRICE}, path=str(tmp / "usage.db"),
                          budgets={} if budget is None else {"*": budget}),
        obs=ObsSettings(request_log=str(tmp / "requests.log")),
        cache=CacheSettings(exact=ExactCacheSettings(enabled=cache), store="memory"),
        batch=BatchSettings(enabled=False),
    )


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeUpstream]:
    up = FakeUpstream(tokens=8)
    with LiveServer(up) as server:
        up.base_url = f"{server.url}/v1"
        yield up


def _log(tmp: Path) -> list[dict[str, object]]:
    return [orjson.loads(x) for x in (tmp / "requests.log").read_bytes().splitlines() if x.strip()]


def test_cost_header_log_line_and_spend_counters(upstream: FakeUpstream, tmp_path: Path) -> None:
    app = build_app(_settings(upstream, tmp_path))
    with LiveServer(app) as server:
        client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)
        raw = client.chat.completions.with_raw_response.create(
            model="fake", messages=[{"role": "user", "content": "price me"}], max_tokens=8)
        resp = raw.parse()
        assert resp.usage is not None
        expected = (resp.usage.prompt_tokens * 1000 + resp.usage.completion_tokens * 3000) / 1e6
        assert float(raw.headers["x-blink-cost-usd"]) == pytest.approx(expected, abs=1e-8)
        chunks = list(client.chat.completions.create(
            model="fake", messages=[{"role": "user", "content": "stream me"}], max_tokens=8, stream=True,
            stream_options={"include_usage": True}))
        streamed = chunks[-1].usage
        assert streamed is not None
    lines = [x for x in _log(tmp_path) if x.get("route") == "chat"]
    assert [x["cost_usd"] for x in lines][0] == pytest.approx(expected, abs=1e-8)
    stream_cost = (streamed.prompt_tokens * 1000 + streamed.completion_tokens * 3000) / 1e6
    assert lines[1]["cost_usd"] == pytest.approx(stream_cost, abs=1e-8)
    rows = read_usage(tmp_path / "usage.db")  # flushed when the app stopped
    ((month, key, model, requests, prompt, completion, _cached, cost, hits, _saved),) = rows
    assert (key, model, requests, hits) == ("anonymous", "fake", 2, 0)
    assert prompt == resp.usage.prompt_tokens + streamed.prompt_tokens
    assert completion == resp.usage.completion_tokens + streamed.completion_tokens
    assert cost == pytest.approx(expected + stream_cost)


def test_cache_hit_costs_nothing_and_counts_as_saving(upstream: FakeUpstream, tmp_path: Path) -> None:
    app = build_app(_settings(upstream, tmp_path, cache=True))
    with LiveServer(app) as server, httpx.Client(timeout=30) as h:
        body = {"model": "fake", "messages": [{"role": "user", "content": "same question"}], "max_tokens": 8,
                "temperature": 0}
        first = h.post(f"{server.url}/v1/chat/completions", json=body)
        assert float(first.headers["x-blink-cost-usd"]) > 0
        import time

        for _ in range(50):  # the fill is scheduled after the response
            second = h.post(f"{server.url}/v1/chat/completions", json=body)
            if second.headers.get("x-blink-cache") not in (None, "miss"):
                break
            time.sleep(0.05)
        assert second.headers["x-blink-cost-usd"] == "0.00000000"
    ((*_, requests, _p, _c, _cached, cost, hits, saved),) = read_usage(tmp_path / "usage.db")
    assert hits >= 1 and saved == pytest.approx(float(first.headers["x-blink-cost-usd"]), rel=1e-6)
    assert cost == pytest.approx(float(first.headers["x-blink-cost-usd"]) * (requests - hits), rel=1e-6)


def test_budget_blocks_with_429_budget_exceeded(upstream: FakeUpstream, tmp_path: Path) -> None:
    app = build_app(_settings(upstream, tmp_path, budget=0.01))
    with LiveServer(app) as server:
        client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)
        spent = 0.0
        with pytest.raises(openai.RateLimitError) as exc:
            for _ in range(200):  # each request costs a few cents at these prices: the budget goes fast
                raw = client.chat.completions.with_raw_response.create(
                    model="fake", messages=[{"role": "user", "content": "spend"}], max_tokens=8)
                spent += float(raw.headers["x-blink-cost-usd"])
        assert spent >= 0.01  # blocked only once the budget was used up
        err = exc.value.body
        assert isinstance(err, dict) and err["type"] == "budget_exceeded" and err["code"] == "budget_exceeded"
        assert int(exc.value.response.headers["retry-after"]) > 0
        with pytest.raises(openai.RateLimitError):  # streams are blocked as well
            list(client.chat.completions.create(model="fake", messages=[{"role": "user", "content": "x"}],
                                                stream=True))
    # The spend survives a restart: the same budget still blocks.
    with LiveServer(build_app(_settings(upstream, tmp_path, budget=0.01))) as server:
        r = httpx.post(f"{server.url}/v1/chat/completions",
                       json={"model": "fake", "messages": [{"role": "user", "content": "again"}]}, timeout=30)
        assert r.status_code == 429 and r.json()["error"]["code"] == "budget_exceeded"
