"""Pre-computation through a real gateway (API keys, exact + semantic cache, the real embedder) in
front of a real fake upstream: predicted and refreshed entries are served only to their own
tenant, only through the hit guard, and only within the token and storage bounds."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from gateway_helpers import cached_settings, serving
from live_server import LiveServer
from upstream_server import FakeUpstream

from blink.config.gateway import AuthSettings
from blink.config.server import ServerSettings
from blink.gateway.auth.keys import ApiKeyStore
from blink.gateway.http.dispatch import GatewayApp
from tests.gateway.cache.cache_helpers import cache_entries, wait_entries

SYSTEM = {"role": "system", "content": "You are the support agent of a broadband provider."}
Q1 = "How do I reset my router?"
Q1_AGAIN = "How can I reset my router?"
Q2 = "Can I upgrade my plan to 100 Mbps?"
Q2_AGAIN = "Could I upgrade my plan to 100 Mbps?"
Q2_TRAP = "Can I upgrade my plan to 500 Mbps?"  # close in meaning, a different answer: the guard says no


@pytest.fixture(scope="module")
def own_upstream() -> Iterator[FakeUpstream]:
    up = FakeUpstream(tokens=4)
    with LiveServer(up) as server:
        up.base_url = f"{server.url}/v1"
        yield up


@pytest.fixture(scope="module")
def tenants(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str]:
    path = tmp_path_factory.mktemp("pre-keys") / "keys.db"
    store = ApiKeyStore(path)
    return path, store.create("tenant-a")[1], store.create("tenant-b")[1]


def _gateway(upstream: FakeUpstream, tenants: tuple[Path, str, str], cache: dict[str, Any]) -> Any:
    settings = cached_settings(upstream, {"store": "memory", **cache},
                              auth=AuthSettings(enabled=True, keys_db=str(tenants[0])))
    return serving(settings)


@pytest.fixture(scope="module")
def predicting(own_upstream: FakeUpstream, tenants: tuple[Path, str, str],
               onnx_dir: Path) -> Iterator[tuple[LiveServer, GatewayApp]]:  # fmt: skip
    cache = {"exact": {"enabled": True}, "semantic": {"enabled": True, "onnx_dir": str(onnx_dir)},
             "precompute": {"predict": True, "predict_min_count": 1, "max_predicted": 1}}
    with _gateway(own_upstream, tenants, cache) as gw:
        yield gw


def _ask(server: LiveServer, key: str, messages: list[dict[str, Any]]) -> httpx.Response:
    body = {"model": "fake", "messages": messages, "temperature": 0, "max_tokens": 16}
    resp = httpx.post(f"{server.url}/v1/chat/completions", json=body, headers={"authorization": f"Bearer {key}"},
                      timeout=30)
    assert resp.status_code == 200, resp.text
    return resp


def _turn(server: LiveServer, key: str, history: list[dict[str, Any]], question: str) -> httpx.Response:
    """Ask ``question`` after ``history``, then append the exchange to it as a client would."""
    history.append({"role": "user", "content": question})
    resp = _ask(server, key, history)
    history.append({"role": "assistant", "content": resp.json()["choices"][0]["message"]["content"]})
    return resp


def _wait(cond: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def _jobs(app: GatewayApp, kind: str, outcome: str = "done") -> int:
    return app.state.precompute.stats.jobs[(kind, outcome)]


def test_the_learned_next_turn_is_served_to_its_tenant_only_and_through_the_guard(
    predicting: tuple[LiveServer, GatewayApp], tenants: tuple[Path, str, str], own_upstream: FakeUpstream
) -> None:
    server, app = predicting
    _, key_a, key_b = tenants
    # One conversation teaches tenant A's flow: the reset question, then the upgrade question.
    first: list[dict[str, Any]] = [SYSTEM]
    assert _turn(server, key_a, first, Q1).headers["x-blink-cache"] == "miss"
    assert _turn(server, key_a, first, Q2).headers["x-blink-cache"] == "miss"
    assert _jobs(app, "predict") == 0  # nothing had been learned when those turns were answered

    # A new conversation of tenant A opens with a paraphrase: its answer comes from the cache, and
    # the likely next turn is generated into this conversation's namespace in the idle lane.
    convo: list[dict[str, Any]] = [SYSTEM]
    assert _turn(server, key_a, convo, Q1_AGAIN).headers["x-blink-cache"] == "semantic"
    _wait(lambda: _jobs(app, "predict") == 1, "the prediction")
    job = own_upstream.requests[-1]
    assert job["messages"][-1] == {"role": "user", "content": Q2}
    assert job["messages"][:-1] == convo  # exactly this conversation so far

    # The trap is refused by the guard even though the pre-computed entry is its neighbour...
    trap = _ask(server, key_a, [*convo, {"role": "user", "content": Q2_TRAP}])
    assert trap.headers["x-blink-cache"] == "miss"
    # ... while the paraphrase is answered from the pre-computed entry, and says so.
    hit = _ask(server, key_a, [*convo, {"role": "user", "content": Q2_AGAIN}])
    assert hit.headers["x-blink-cache"] == "semantic"
    assert hit.headers["x-blink-precomputed"] == "predict"
    # Counted just after the replay starts (``on_hit`` defers it): the client may read the answer first.
    _wait(lambda: app.state.precompute.stats.hits["predict"] == 1, "the hit to be counted")

    # Tenant B walks the same conversation: tenant A's flows predict nothing for it, and its
    # second turn is a miss (tenant A's pre-computed entry lives in tenant A's namespace).
    before = len(own_upstream.requests)
    other: list[dict[str, Any]] = [SYSTEM]
    assert _turn(server, key_b, other, Q1).headers["x-blink-cache"] == "miss"
    second = _turn(server, key_b, other, Q2_AGAIN)
    assert second.headers["x-blink-cache"] == "miss"
    assert "x-blink-precomputed" not in second.headers
    time.sleep(0.3)  # time for a job, had one been queued
    assert len(own_upstream.requests) == before + 2  # the two user turns; no job for B
    assert _jobs(app, "predict") == 1

    # The storage bound (max_predicted: 1): a third conversation of A is not pre-computed.
    third: list[dict[str, Any]] = [SYSTEM]
    _turn(server, key_a, third, Q1_AGAIN)
    _wait(lambda: app.state.precompute.stats.skipped[("predict", "storage")] == 1, "the storage refusal")
    assert _jobs(app, "predict") == 1


def test_metrics_name_the_precompute_series(predicting: tuple[LiveServer, GatewayApp]) -> None:
    server, _ = predicting
    text = httpx.get(f"{server.url}/metrics", timeout=10).text
    for name in ("blink_precompute_jobs_total", "blink_precompute_tokens_total", "blink_precompute_hits_total",
                 "blink_precompute_budget_tokens"):
        assert name in text


@pytest.fixture(scope="module")
def refreshing(own_upstream: FakeUpstream, tenants: tuple[Path, str, str]) -> Iterator[tuple[LiveServer, GatewayApp]]:
    # Every entry is "near its TTL end", so the scan picks any entry hit twice at once.
    cache = {"exact": {"enabled": True}, "ttl_s": 3600,
             "precompute": {"refresh": True, "refresh_lead_s": 7200, "refresh_interval_s": 0.1}}
    with _gateway(own_upstream, tenants, cache) as gw:
        yield gw


def test_a_hot_entry_is_regenerated_in_place_for_its_own_tenant(
    refreshing: tuple[LiveServer, GatewayApp], tenants: tuple[Path, str, str], own_upstream: FakeUpstream
) -> None:
    server, app = refreshing
    _, key_a, key_b = tenants
    msgs = [SYSTEM, {"role": "user", "content": "What are your opening hours?"}]
    entries = cache_entries(app)
    assert _ask(server, key_a, msgs).headers["x-blink-cache"] == "miss"
    wait_entries(app, entries + 1, timeout=10)
    time.sleep(0.3)
    assert _jobs(app, "refresh") == 0  # filled, but not hit: not worth its tokens again
    for _ in range(2):
        assert _ask(server, key_a, msgs).headers["x-blink-cache"] == "exact"
    _wait(lambda: _jobs(app, "refresh") == 1, "the refresh")
    assert own_upstream.requests[-1]["messages"] == msgs
    hit = _ask(server, key_a, msgs)
    assert hit.headers["x-blink-cache"] == "exact"
    assert hit.headers["x-blink-precomputed"] == "refresh"
    assert app.state.precompute.stats.tokens["refresh"] > 0
    # Tenant B never sees tenant A's entry, refreshed or not.
    assert _ask(server, key_b, msgs).headers["x-blink-cache"] == "miss"
    time.sleep(0.3)
    assert _jobs(app, "refresh") == 1  # hit once since: not refreshed again


def test_the_token_budget_stops_jobs(own_upstream: FakeUpstream, tenants: tuple[Path, str, str]) -> None:
    cache = {"exact": {"enabled": True}, "precompute": {"refresh": True, "refresh_lead_s": 1e9,
                                                         "refresh_interval_s": 0.1, "tokens_per_hour": 5}}
    with _gateway(own_upstream, tenants, cache) as (server, app):
        msgs = [SYSTEM, {"role": "user", "content": "Do you ship abroad?"}]
        for _ in range(3):
            _ask(server, tenants[1], msgs)
        before = len(own_upstream.requests)
        _wait(lambda: app.state.precompute.stats.skipped[("refresh", "budget")] == 1, "the budget refusal")
        assert len(own_upstream.requests) == before
        assert _jobs(app, "refresh") == 0


def test_a_running_job_takes_nothing_from_the_keys_sequence_quota(
    own_upstream: FakeUpstream, tenants: tuple[Path, str, str]
) -> None:
    cache = {"exact": {"enabled": True}, "precompute": {"refresh": True, "refresh_lead_s": 1e9,
                                                         "refresh_interval_s": 0.05}}
    settings = cached_settings(own_upstream, {"store": "memory", **cache},
                                 auth=AuthSettings(enabled=True, keys_db=str(tenants[0])),
                                 server=ServerSettings(max_sequences_per_key=1))
    with serving(settings) as (server, app):
        # The upstream streams this answer slowly, so the refresh job is still running below.
        slow = {"model": "fake", "messages": [SYSTEM, {"role": "user", "content": "Is there an outage?"}],
                "temperature": 0, "user": "tokens=20;delay=0.05"}
        headers = {"authorization": f"Bearer {tenants[1]}"}
        for _ in range(3):
            assert httpx.post(f"{server.url}/v1/chat/completions", json=slow, headers=headers,
                              timeout=30).status_code == 200
        stats = app.state.precompute.stats
        _wait(lambda: len(own_upstream.requests) > 0 and own_upstream.requests[-1].get("user") == slow["user"]
              and stats.jobs[("refresh", "done")] == 0 and _running(own_upstream), "the refresh to start")
        user = _ask(server, tenants[1], [SYSTEM, {"role": "user", "content": "Any news?"}])  # 200, not a 429
        assert user.headers["x-blink-cache"] == "miss"
        assert stats.jobs[("refresh", "done")] == 0  # the job was still holding its sequence
        _wait(lambda: stats.jobs[("refresh", "done")] == 1, "the refresh to finish")


def _running(upstream: FakeUpstream) -> bool:
    return len(upstream.requests) > len(upstream.completed_requests) + len(upstream.cancelled_requests)
