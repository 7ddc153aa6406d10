"""openai_http replicas from a static list or DNS, behind one model name: balanced, health
checked (out of rotation when /health fails, back when it passes), and a dead replica costs a
retry, not a client error. Real upstreams on 127.0.0.1, the real openai client."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from live_server import LiveServer
from upstream_server import FakeUpstream

from blink.backends.discovery import DnsSource, StaticSource
from blink.config.discovery import DiscoverySettings
from blink.config.models import OpenAIHTTPModel
from blink.config.server import ServerSettings
from blink.config.settings import Settings
from blink.gateway.router.replica_set import ReplicaSetBackend
from blink.serve import build_app

MSGS = [{"role": "user", "content": "hi"}]


class Switchable:
    """A FakeUpstream whose /health can be made to fail (a replica that reports itself sick)."""

    def __init__(self) -> None:
        self.fake = FakeUpstream(tokens=4)
        self.healthy = True

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] == "/health" and not self.healthy:
            await send({"type": "http.response.start", "status": 503, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        await self.fake(scope, receive, send)


@pytest.fixture
def replicas() -> Iterator[list[tuple[Switchable, LiveServer]]]:
    apps = [Switchable() for _ in range(3)]
    servers = [LiveServer(a).start() for a in apps]
    yield list(zip(apps, servers, strict=True))
    for s in servers:
        s.stop()


def _chat(url: str) -> httpx.Response:
    return httpx.post(f"{url}/v1/chat/completions", json={"model": "pool", "messages": MSGS}, timeout=10)


def _wait(cond: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.05)


def test_static_replicas_balance_leave_on_failed_health_and_survive_a_dead_one(
    replicas: list[tuple[Switchable, LiveServer]],
) -> None:
    urls = [f"{s.url}/v1" for _, s in replicas]
    discovery = DiscoverySettings(replicas=urls[1:], health_interval_s=0.1, unhealthy_after=2)
    model = OpenAIHTTPModel(name="pool", kind="openai_http", base_url=urls[0], upstream_model="fake", discovery=discovery)
    app = build_app(Settings(server=ServerSettings(), models=[model]))
    with LiveServer(app) as gw:
        backend = app.state.registry.resolve("pool")
        assert isinstance(backend, ReplicaSetBackend) and len(backend.tier.replicas) == 3
        assert all(_chat(gw.url).status_code == 200 for _ in range(30))
        served = [len(a.fake.requests) for a, _ in replicas]
        assert all(n > 0 for n in served), served  # every replica took traffic

        # Replica 0 reports itself sick: out of rotation after two failed checks, then no traffic.
        replicas[0][0].healthy = False
        _wait(lambda: not backend.tier.replicas[0].healthy)
        before = len(replicas[0][0].fake.requests)
        assert all(_chat(gw.url).status_code == 200 for _ in range(10))
        assert len(replicas[0][0].fake.requests) == before
        replicas[0][0].healthy = True
        _wait(lambda: backend.tier.replicas[0].healthy)  # back in rotation

        # Replica 1 dies between two checks: requests still succeed (retried on another replica).
        replicas[1][1].stop()
        assert all(_chat(gw.url).status_code == 200 for _ in range(10))
        _wait(lambda: not backend.tier.replicas[1].healthy)
        health = httpx.get(f"{gw.url}/health", timeout=5)
        assert health.status_code == 200


async def test_dns_source_resolves_every_address_of_a_name() -> None:
    urls = await DnsSource("dns://localhost:8123/v1").urls()
    assert "http://127.0.0.1:8123/v1" in urls
    assert all(u.endswith(":8123/v1") for u in urls)


class MovingSource:
    """Replica addresses that change between resolutions, as pods come and go."""

    def __init__(self, urls: list[str]) -> None:
        self.current = urls

    async def urls(self) -> list[str]:
        return list(self.current)


async def test_discovery_adds_and_removes_replicas_keeping_their_state(
    replicas: list[tuple[Switchable, LiveServer]],
) -> None:
    from blink.backends.openai_http import OpenAIHTTPBackend

    urls = [f"{s.url}/v1" for _, s in replicas]
    source = MovingSource(urls[:1])
    rs = ReplicaSetBackend("pool", source, lambda name, url: OpenAIHTTPBackend(name, url, upstream_model="fake"),
                           DiscoverySettings(mode="dns", interval_s=60, health_path=""))
    await rs.start()
    try:
        first = rs.tier.replicas[0]
        source.current = urls
        await rs.refresh()
        assert len(rs.tier.replicas) == 3 and rs.tier.replicas[0] is first
        source.current = urls[1:]
        await rs.refresh()
        assert [r.name for r in rs.tier.replicas] == [f"pool@{u.split('//')[1].split('/')[0]}" for u in urls[1:]]
        source.current = []
        await rs.refresh()
        assert (await rs.health()).ok is False
    finally:
        await rs.aclose()


async def test_static_source_deduplicates() -> None:
    assert await StaticSource(["http://a/v1", "http://a/v1", "http://b/v1"]).urls() == ["http://a/v1", "http://b/v1"]


def test_dns_discovery_end_to_end_through_the_gateway(replicas: list[tuple[Switchable, LiveServer]]) -> None:
    """``dns://localhost:PORT``: every address localhost resolves to becomes a replica; one that
    nothing listens on (::1 here, when the resolver returns it) fails its health checks and
    leaves rotation, and every request is answered."""
    port = replicas[0][1].port
    discovery = DiscoverySettings(mode="dns", interval_s=0.5, health_interval_s=0.1)
    model = OpenAIHTTPModel(name="pool", kind="openai_http", base_url=f"dns://localhost:{port}/v1",
                          upstream_model="fake", discovery=discovery)
    app = build_app(Settings(server=ServerSettings(), models=[model]))
    with LiveServer(app) as gw:
        backend = app.state.registry.resolve("pool")
        assert f"pool@127.0.0.1:{port}" in [r.name for r in backend.tier.replicas]
        assert all(_chat(gw.url).status_code == 200 for _ in range(10))
        assert len(replicas[0][0].fake.requests) >= 10
