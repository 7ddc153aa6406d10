"""The pause rule, through a real gateway and a real upstream: a pre-computation job due while a
user's request is streaming reaches the upstream only after that request has ended and the quiet
window after its end has passed, so its prompt building and embedding never share the cores with a user's."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from gateway_helpers import cached_settings, serving
from live_server import LiveServer
from upstream_server import FakeUpstream

from blink.gateway.http.dispatch import GatewayApp
from tests.gateway.cache.cache_helpers import cache_entries, wait_entries

HOT = [{"role": "user", "content": "Which plans do you sell?"}]
QUIET_MS = 300


@pytest.fixture(scope="module")
def gateway() -> Iterator[tuple[LiveServer, GatewayApp, FakeUpstream]]:
    up = FakeUpstream(tokens=4)
    with LiveServer(up) as upstream:
        up.base_url = f"{upstream.url}/v1"
        cache = {"store": "memory", "exact": {"enabled": True},
                 "precompute": {"refresh": True, "refresh_min_hits": 1, "refresh_lead_s": 1e9,
                                "refresh_interval_s": 0.05, "quiet_ms": QUIET_MS}}
        with serving(cached_settings(up, cache)) as (server, app):
            yield server, app, up


def _ask(url: str, messages: list[dict[str, Any]], user: str | None = None) -> httpx.Response:
    body: dict[str, Any] = {"model": "fake", "messages": messages, "max_tokens": 8, "temperature": 0}
    if user is not None:
        body["user"] = user
    resp = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=30)
    assert resp.status_code == 200, resp.text
    return resp


def _hot_requests(up: FakeUpstream) -> int:
    return sum(r.get("messages") == HOT for r in up.requests)


def test_a_due_job_waits_for_the_users_request_to_end_and_the_quiet_window(
    gateway: tuple[LiveServer, GatewayApp, FakeUpstream],
) -> None:
    server, app, up = gateway
    entries = cache_entries(app)
    assert _ask(server.url, HOT).headers["x-blink-cache"] == "miss"
    wait_entries(app, entries + 1, timeout=10)
    # The slow user request starts first; the hit right after makes the entry due at once.
    ended: list[float] = []

    def slow_user() -> None:
        _ask(server.url, [{"role": "user", "content": "A slow one"}], user="tokens=4;delay=0.4")
        ended.append(time.monotonic())

    thread = threading.Thread(target=slow_user)
    thread.start()
    time.sleep(0.2)
    assert _ask(server.url, HOT).headers["x-blink-cache"] == "exact"
    activity = app.state.pipeline.activity
    seen_while_busy = 0
    while thread.is_alive():
        seen_while_busy = max(seen_while_busy, _hot_requests(up) - 1)
        time.sleep(0.01)
    thread.join()
    users_last = activity.last_active  # the slow request's end: the last user activity
    assert seen_while_busy == 0  # nothing of the job reached the upstream while the user streamed
    deadline = time.monotonic() + 10
    while _hot_requests(up) < 2:
        assert time.monotonic() < deadline, "the refresh never ran once users were quiet"
        time.sleep(0.005)
    assert time.monotonic() - ended[0] >= QUIET_MS / 1000 * 0.8  # and not before the window passed
    stats = app.state.precompute.stats
    deadline = time.monotonic() + 10
    while stats.jobs[("refresh", "done")] < 1:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert activity.in_flight == 0  # every user lease was given back (a replay's at once)
    assert activity.last_active == users_last  # the server's own job is not a user

