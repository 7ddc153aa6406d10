"""Two gateway processes in front of two model-server replicas, sharing real Redis (rate limits,
exact cache) and real PostgreSQL + pgvector (semantic cache, API keys), on loopback.

The tests run in file order: the last one stops Redis for good."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from cluster import Proc, gateway, replica
from servers import PostgresServer, RedisServer

from blink.gateway.auth.postgres import PostgresKeyStore

SYSTEM = {"role": "system", "content": "You are a helpful travel-insurance assistant."}


@pytest.fixture(scope="module")
def stores() -> Iterator[tuple[RedisServer, PostgresServer]]:
    with RedisServer() as redis, PostgresServer() as pg:
        yield redis, pg


@pytest.fixture(scope="module")
def replicas() -> Iterator[list[Proc]]:
    procs = [replica(tokens=16, delay=0.01), replica(tokens=16, delay=0.01)]
    yield procs
    for p in procs:
        p.stop()


@pytest.fixture(scope="module")
def keys(stores: tuple[RedisServer, PostgresServer]) -> dict[str, str]:
    store = PostgresKeyStore(stores[1].dsn)
    return {"limited": store.create("acme", requests_per_minute=4)[1], "free": store.create("acme")[1]}


@pytest.fixture(scope="module")
def gateways(stores: tuple[RedisServer, PostgresServer], replicas: list[Proc], keys: dict[str, str],
             onnx_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Proc]]:
    redis, pg = stores
    urls = [f"{r.url}/v1" for r in replicas]
    config: dict[str, Any] = {
        "models": [{"name": "fake", "kind": "openai_http", "base_url": urls[0], "upstream_model": "fake",
                    "discovery": {"replicas": urls[1:], "health_interval_s": 0.2}}],
        "auth": {"enabled": True, "postgres_dsn": pg.dsn},
        # 2 s store timeouts: on a loaded CI machine a slow answer must not read as a down store.
        "ratelimit": {"storage_uri": redis.url, "timeout_s": 2.0},
        "cache": {"exact": {"enabled": True}, "semantic": {"enabled": True, "onnx_dir": str(onnx_dir)},
                  "store": "redis", "redis_url": redis.url, "postgres_dsn": pg.dsn, "store_timeout_s": 2.0},
    }
    tmp = tmp_path_factory.mktemp("gateways")
    gws = [gateway(config, tmp), gateway(config, tmp)]
    try:
        for g in gws:
            g.wait_ready()
        yield gws
    finally:
        for g in gws:
            g.stop()


def _ask(gw: Proc, key: str, question: str, timeout: float = 15, **extra: Any) -> httpx.Response:
    body = {"model": "fake", "messages": [SYSTEM, {"role": "user", "content": question}], "temperature": 0, **extra}
    return httpx.post(f"{gw.url}/v1/chat/completions", json=body, headers={"authorization": f"Bearer {key}"},
                      timeout=timeout)


def _until(gw: Proc, key: str, question: str, outcome: str, timeout: float = 10.0) -> httpx.Response:
    """Ask until the answer comes from the cache as ``outcome`` (fills land just after a response)."""
    deadline = time.monotonic() + timeout
    while True:
        r = _ask(gw, key, question)
        if r.headers.get("x-blink-cache") == outcome or time.monotonic() > deadline:
            return r
        time.sleep(0.1)


def test_rate_limits_are_shared(gateways: list[Proc], keys: dict[str, str]) -> None:
    a, b = gateways
    statuses = [_ask(g, keys["limited"], f"limit {i}", temperature=1).status_code for i, g in enumerate([a, b, a, b])]
    assert statuses == [200] * 4
    for g in (a, b):  # the 5th request of the minute is refused wherever it lands
        r = _ask(g, keys["limited"], "one more", temperature=1)
        assert r.status_code == 429 and r.json()["error"]["type"] == "rate_limit_error"


def test_exact_cache_is_shared(gateways: list[Proc], keys: dict[str, str]) -> None:
    a, b = gateways
    first = _ask(a, keys["free"], "What does my policy cover abroad?")
    assert first.status_code == 200 and first.headers["x-blink-cache"] == "miss"
    hit = _until(b, keys["free"], "What does my policy cover abroad?", "exact")
    assert hit.headers["x-blink-cache"] == "exact"
    assert hit.json()["choices"][0]["message"]["content"] == first.json()["choices"][0]["message"]["content"]


def test_semantic_cache_is_shared(gateways: list[Proc], keys: dict[str, str]) -> None:
    a, b = gateways
    assert _ask(a, keys["free"], "How do I cancel my travel insurance policy?").status_code == 200
    hit = _until(b, keys["free"], "How can I cancel my travel insurance policy?", "semantic")
    assert hit.headers["x-blink-cache"] == "semantic"


def test_gateway_sigkilled_mid_load_other_keeps_serving_no_acknowledged_entry_lost(
    gateways: list[Proc], keys: dict[str, str]
) -> None:
    a, b = gateways
    # Acknowledged entries: filled through gateway a and seen by gateway b.
    acked = [f"Acknowledged question number {i}?" for i in range(6)]
    for q in acked:
        assert _ask(a, keys["free"], q).status_code == 200
    for q in acked:
        assert _until(b, keys["free"], q, "exact").headers["x-blink-cache"] == "exact"

    results: list[int] = []
    stop = threading.Event()

    def load() -> None:
        i = 0
        while not stop.is_set():
            results.append(_ask(b, keys["free"], f"load on b {i}", temperature=1).status_code)
            i += 1

    def load_a() -> None:  # in flight on a when it dies: any outcome, it is not asked to survive
        for i in range(50):
            try:
                _ask(a, keys["free"], f"load on a {i}", temperature=1, timeout=5)
            except httpx.HTTPError:
                return

    threads = [threading.Thread(target=load), threading.Thread(target=load_a)]
    for t in threads:
        t.start()
    time.sleep(0.5)
    a.kill()
    time.sleep(1.0)
    stop.set()
    for t in threads:
        t.join(timeout=20)
    assert results and all(s == 200 for s in results), results
    for q in acked:
        assert _ask(b, keys["free"], q).headers["x-blink-cache"] == "exact"


def test_replica_killed_traffic_moves_in_flight_streams_end_with_an_error(
    gateways: list[Proc], replicas: list[Proc], keys: dict[str, str]
) -> None:
    b = gateways[1]
    streams: list[str] = []

    def stream(i: int) -> None:
        body = {"model": "fake", "messages": [{"role": "user", "content": f"stream {i}"}], "stream": True,
                "temperature": 1, "user": "tokens=200;delay=0.01"}
        with httpx.stream("POST", f"{b.url}/v1/chat/completions", json=body, timeout=30,
                          headers={"authorization": f"Bearer {keys['free']}"}) as r:
            streams.append(r.read().decode())

    threads = [threading.Thread(target=stream, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    time.sleep(0.6)  # every stream is past its first token
    replicas[0].kill()
    for t in threads:
        t.join(timeout=30)
    assert len(streams) == 4
    cut = [s for s in streams if "[DONE]" not in s or '"error"' in s]
    for s in cut:  # a stream on the killed replica ends with an explicit error event
        assert '"error"' in s, s[-300:]
    # New requests all succeed: retried on the live replica until health checks drop the dead one.
    statuses = [_ask(b, keys["free"], f"after the kill {i}", temperature=1).status_code for i in range(10)]
    assert statuses == [200] * 10


def test_redis_stopped_mid_load_requests_keep_succeeding(
    gateways: list[Proc], stores: tuple[RedisServer, PostgresServer], keys: dict[str, str]
) -> None:
    b = gateways[1]
    redis = stores[0]
    statuses: list[int] = []
    stop = threading.Event()

    def load() -> None:
        i = 0
        while not stop.is_set():
            statuses.append(_ask(b, keys["free"], f"redis test {i}").status_code)
            i += 1

    t = threading.Thread(target=load)
    t.start()
    time.sleep(0.5)
    redis.__exit__(None, None, None)  # stopped by PID, for good
    time.sleep(2.5)
    stop.set()
    t.join(timeout=30)
    assert statuses and all(s == 200 for s in statuses), statuses  # rate limits fail open, caches skipped
    t0 = time.monotonic()
    r = _ask(b, keys["free"], "What does my policy cover abroad?")
    assert r.status_code == 200 and r.headers["x-blink-cache"] != "exact" and time.monotonic() - t0 < 5
    # The limited key spent its minute in the now-dead Redis: admitted anyway (fail_open).
    assert _ask(b, keys["limited"], "limits fail open", temperature=1).status_code == 200
    metrics = httpx.get(f"{b.url}/metrics").text
    assert 'blink_store_errors_total{op="admit",store="ratelimit"}' in metrics
    assert re.search(r'blink_store_errors_total\{op="\w+",store="redis_cache"\} [1-9]', metrics)
