"""The dashboard's pre-computation and compression panels: figures read from the exported series
(a real refresh job through a real gateway and upstream; a compressing tier's collector), shown in
headless Chromium, and hidden while the feature is off."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from live_server import LiveServer
from prometheus_client import CollectorRegistry
from system_tools import require
from test_dashboard import _ARGS
from upstream_server import FakeUpstream

from blink.config.gateway import CacheSettings
from blink.config.models import OpenAIHTTPModel
from blink.config.server import ServerSettings
from blink.config.settings import Settings
from blink.gateway.compression.metrics import CompressionCollector, CompressionStats
from blink.gateway.dashboard.savings import compression_panel, precompute_panel
from blink.gateway.http.dispatch import GatewayApp
from blink.gateway.precompute.metrics import PrecomputeCollector, PrecomputeStats
from blink.serve import build_app

HOT = [{"role": "user", "content": "What does the fibre plan cost?"}]


def test_panels_are_none_without_their_series_and_sum_over_labels() -> None:
    registry = CollectorRegistry(auto_describe=True)  # as GatewayMetrics builds it
    assert precompute_panel(registry) is None and compression_panel(registry) is None
    pre = PrecomputeStats()
    pre.jobs.update({("refresh", "done"): 2, ("predict", "done"): 2, ("predict", "cached"): 5})
    pre.hits.update({"refresh": 1, "predict": 5})
    pre.tokens.update({"refresh": 40, "predict": 60})
    registry.register(PrecomputeCollector(pre))
    tiers = [("big", CompressionStats(compressed=2, tokens_in=600, tokens_removed=400)),
             ("huge", CompressionStats(unchanged=1, tokens_in=300, tokens_removed=200))]
    registry.register(CompressionCollector(tiers))
    p = precompute_panel(registry)
    assert p is not None
    assert (p["entries"], p["hits"], p["hits_per_entry"], p["tokens_idle"]) == (4, 6, 1.5, 100)
    assert p["jobs"] == {"done": 4, "cached": 5}
    c = compression_panel(registry)
    assert c is not None
    assert (c["tokens_scored"], c["tokens_saved"], c["ratio"]) == (900, 600, 3.0)
    assert c["requests"] == {"compressed": 2, "unchanged": 1, "failed": 0}
    # Nothing compressed yet: no ratio rather than a division by zero.
    empty = CollectorRegistry(auto_describe=True)
    empty.register(CompressionCollector([("big", CompressionStats())]))
    assert compression_panel(empty)["ratio"] is None  # type: ignore[index]


def test_features_off_hide_both_panels(gateway: LiveServer) -> None:
    totals = httpx.get(f"{gateway.url}/dashboard/stats").json()["totals"]
    assert totals["precompute"] is None and totals["compression"] is None


@pytest.fixture(scope="module")
def saving(upstream: FakeUpstream) -> Iterator[tuple[LiveServer, GatewayApp]]:
    settings = Settings(
        server=ServerSettings(),
        models=[OpenAIHTTPModel(name="fake", kind="openai_http", base_url=upstream.base_url, read_timeout_s=30)],
        cache=CacheSettings.model_validate({
            "store": "memory", "exact": {"enabled": True},
            "precompute": {"refresh": True, "refresh_min_hits": 1, "refresh_lead_s": 1e9,
                           "refresh_interval_s": 0.05, "quiet_ms": 0},
        }),
    )
    app = build_app(settings)
    # A compressing tier needs an embedded scorer (tests/gateway/compression/ runs one); the panel
    # only reads the series, so this tier's collector stands in for it on the app's own registry.
    app.state.metrics.registry.register(
        CompressionCollector([("fake", CompressionStats(compressed=3, tokens_in=900, tokens_removed=600))]))
    with LiveServer(app) as server:
        yield server, app


def _ask(url: str) -> dict[str, Any]:
    resp = httpx.post(f"{url}/v1/chat/completions", json={"model": "fake", "messages": HOT, "max_tokens": 8, "temperature": 0},
                      timeout=30)
    assert resp.status_code == 200, resp.text
    return dict(resp.headers)


def test_panels_show_a_real_refresh_and_the_compression_figures_in_chromium(
    saving: tuple[LiveServer, GatewayApp],
) -> None:
    from playwright.sync_api import sync_playwright

    server, app = saving
    stats = app.state.precompute.stats
    assert _ask(server.url)["x-blink-cache"] == "miss"
    assert _ask(server.url)["x-blink-cache"] == "exact"  # a hit makes the entry due: the refresh runs
    deadline = time.monotonic() + 15
    while stats.jobs[("refresh", "done")] < 1:
        assert time.monotonic() < deadline, "the refresh never ran"
        time.sleep(0.02)
    assert _ask(server.url)["x-blink-precomputed"] == "refresh"  # served from the refreshed entry
    totals = httpx.get(f"{server.url}/dashboard/stats").json()["totals"]
    pre = totals["precompute"]
    assert pre["entries"] >= 1 and pre["hits"] >= 1 and pre["tokens_idle"] > 0
    assert totals["compression"]["ratio"] == 3.0 and totals["compression"]["tokens_saved"] == 600

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=require("chromium"), headless=True, args=_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1200})
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.goto(f"{server.url}/dashboard")
            page.wait_for_function("window.blinkDashboard && window.blinkDashboard.updates >= 1", timeout=20_000)
            assert page.is_visible("#p-precompute") and page.is_visible("#p-compression")
            pre_text = page.inner_text("#precompute")
            assert "tokens spent idle" in pre_text and "hits per entry" in pre_text
            rows = dict(line.split("\t") for line in pre_text.splitlines())
            assert int(rows["entries pre-computed"]) >= 1 and int(rows["tokens spent idle"]) > 0
            comp = dict(line.split("\t") for line in page.inner_text("#compression").splitlines())
            assert comp["ratio (before / after)"] == "3.00×" and comp["tokens saved"] == "600"
        finally:
            browser.close()
    assert errors == []
