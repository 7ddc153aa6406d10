"""Pre-computation on a real embedded engine (a tiny random checkpoint): a refresh job runs in the
engine's idle lane, a user request that arrives meanwhile is served while the job is paused, and
the job still finishes with exactly the answer it regenerates.

That a paused idle sequence gives a user's request its first token in the very next step is the
scheduler's contract, proven step by step in tests/engine/test_scheduler_idle.py; this test shows
the gateway's jobs really reach that lane and never hold a user request behind them.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from gateway_helpers import serving
from live_server import LiveServer

from blink.config.gateway import CacheSettings
from blink.config.models import EmbeddedModel
from blink.config.server import ServerSettings
from blink.config.settings import Settings
from blink.gateway.http.dispatch import GatewayApp

HOT = [{"role": "user", "content": "Tell me a long story about the sea."}]
# Long enough that the user's request lands while the refresh is still generating.
JOB_TOKENS = 400


@pytest.fixture(scope="module")
def served(tiny_qwen2: Path) -> Iterator[tuple[LiveServer, GatewayApp]]:
    settings = Settings(
        server=ServerSettings(),
        models=[EmbeddedModel(name="tiny", kind="embedded", model=str(tiny_qwen2), dtype="float32", threads=1,
                              max_model_len=512)],
        cache=CacheSettings.model_validate({
            "exact": {"enabled": True}, "store": "memory",
            "precompute": {"refresh": True, "refresh_lead_s": 1e9, "refresh_interval_s": 0.05},
        }),
    )
    with serving(settings) as gw:
        yield gw


def _chat(url: str, messages: list[dict[str, str]], max_tokens: int) -> httpx.Response:
    body = {"model": "tiny", "messages": messages, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True}
    resp = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=120)
    assert resp.status_code == 200, resp.text
    return resp


def _engine(url: str, series: str, priority: str) -> float:
    text = httpx.get(f"{url}/metrics", timeout=10).text
    m = re.search(rf'^{series}\{{[^}}]*priority="{priority}"[^}}]*\}} ([0-9.e+]+)$', text, re.M)
    return float(m.group(1)) if m else 0.0


def _wait(cond: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def test_a_refresh_runs_in_the_idle_lane_and_never_holds_a_user_back(served: tuple[LiveServer, GatewayApp]) -> None:
    server, app = served
    stats = app.state.precompute.stats
    original = _chat(server.url, HOT, JOB_TOKENS)
    assert original.headers["x-blink-cache"] == "miss"
    for _ in range(2):
        assert _chat(server.url, HOT, JOB_TOKENS).headers["x-blink-cache"] == "exact"
    _wait(lambda: _engine(server.url, "blink_engine_running", "idle") == 1, "the refresh to run in the idle lane")
    user = _chat(server.url, [{"role": "user", "content": "Hi"}], 4)
    assert user.json()["usage"]["completion_tokens"] == 4
    assert stats.jobs[("refresh", "done")] == 0  # the user was served while the job was still going
    _wait(lambda: stats.jobs[("refresh", "done")] == 1, "the refresh to finish")
    assert _engine(server.url, "blink_engine_admitted_total", "idle") == 1
    assert stats.tokens["refresh"] >= JOB_TOKENS
    again = _chat(server.url, HOT, JOB_TOKENS)
    assert again.headers["x-blink-precomputed"] == "refresh"
    # Paused for the user and resumed, the idle sequence still produced the exact greedy answer.
    assert again.json()["choices"][0]["message"]["content"] == original.json()["choices"][0]["message"]["content"]
