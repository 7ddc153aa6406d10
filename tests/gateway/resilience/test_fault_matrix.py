"""Every injected fault ends in a complete answer or an explicit error — never a truncated success.

The faulty upstream is the only replica of the preferred tier ("primary"); a healthy upstream
serves the fallback tier. Before the first token every fault must fail over transparently;
after it, the stream must end with an SSE error event (the openai client raises), or complete
on the fallback when ``continue_on_fallback`` is set. Every request is bounded in time.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import openai
import pytest
from fault_upstream import MID, MID_STREAM, PRE_FIRST_TOKEN, RAW_TCP, SLOW, FaultUpstream, RawFaultServer
from live_server import LiveServer
from routed_gateway import FULL, client, routed_gateway, stream_chat
from upstream_server import FakeUpstream

TIERS = [{"name": "primary", "replicas": ["faulty"], "cost": 1}, {"name": "fallback", "replicas": ["good"], "cost": 0}]
# A request that fails over pays at most one first-token timeout (0.5 s) plus a fast answer.
_BOUND_S = 5.0


@contextmanager
def faulty(fault: str) -> Iterator[tuple[str, FaultUpstream | RawFaultServer]]:
    if fault in RAW_TCP:
        with RawFaultServer(fault) as raw:
            yield f"{raw.url}/v1", raw
        return
    up = FaultUpstream(tokens=8, fault=fault)
    with LiveServer(up) as server:
        yield f"{server.url}/v1", up


def _hits(server: FaultUpstream | RawFaultServer) -> int:
    return server.hits if isinstance(server, FaultUpstream) else server.accepted


@pytest.mark.parametrize("fault", PRE_FIRST_TOKEN)
def test_fault_before_first_token_fails_over(fault: str, upstream: FakeUpstream) -> None:
    with faulty(fault) as (url, server), routed_gateway(TIERS, {"faulty": url, "good": upstream.base_url}) as gw:
        c = client(gw)
        for _ in range(3):
            t0 = time.monotonic()
            text, finish = stream_chat(c)
            assert (text, finish) == (FULL, "stop")
            assert time.monotonic() - t0 < _BOUND_S
        if fault != "refuse":
            assert _hits(server) >= 1  # the fault was really on the path


@pytest.mark.parametrize("fault", MID_STREAM)
def test_fault_after_first_token_is_an_explicit_error(fault: str, upstream: FakeUpstream) -> None:
    with faulty(fault) as (url, _), routed_gateway(TIERS, {"faulty": url, "good": upstream.base_url}) as gw:
        received = ""
        t0 = time.monotonic()
        with pytest.raises(openai.APIError):
            stream = client(gw).chat.completions.create(
                model="auto", messages=[{"role": "user", "content": "hello"}], stream=True
            )
            for chunk in stream:
                received += chunk.choices[0].delta.content or "" if chunk.choices else ""
        assert received == "".join(f" t{k}" for k in range(MID))
        assert time.monotonic() - t0 < _BOUND_S


@pytest.mark.parametrize("fault", MID_STREAM)
def test_fault_after_first_token_continues_on_fallback(fault: str, upstream: FakeUpstream) -> None:
    urls = {"faulty": None, "good": upstream.base_url}
    with faulty(fault) as (url, _):
        urls["faulty"] = url
        with routed_gateway(TIERS, urls, continue_on_fallback=True) as gw:  # type: ignore[arg-type]
            text, finish = stream_chat(client(gw))
    sent = "".join(f" t{k}" for k in range(MID))
    assert text.startswith(sent) and finish == "stop"
    # The fallback was asked to go on from exactly what the client already has.
    assert upstream.requests[-1]["messages"][-1] == {"role": "assistant", "content": sent}


@pytest.mark.parametrize("fault", SLOW)
def test_slow_upstream_completes(fault: str, upstream: FakeUpstream) -> None:
    with faulty(fault) as (url, server), routed_gateway(TIERS, {"faulty": url, "good": upstream.base_url}) as gw:
        assert stream_chat(client(gw)) == (FULL, "stop")
        assert _hits(server) == 1  # served by the slow replica itself, not failed over


def test_client_error_is_not_retried(upstream: FakeUpstream) -> None:
    with faulty("http_400") as (url, server), routed_gateway(TIERS, {"faulty": url, "good": upstream.base_url}) as gw:
        before = len(upstream.requests)
        with pytest.raises(openai.BadRequestError):
            stream_chat(client(gw))
        assert _hits(server) == 1 and len(upstream.requests) == before


def test_every_replica_down_is_a_fast_typed_503(upstream: FakeUpstream) -> None:
    tiers = [{"name": "only", "replicas": ["a", "b"]}]
    with faulty("refuse") as (a, _), faulty("http_503") as (b, _), routed_gateway(tiers, {"a": a, "b": b}) as gw:
        t0 = time.monotonic()
        with pytest.raises(openai.APIStatusError) as info:
            stream_chat(client(gw))
        assert info.value.status_code == 503 and time.monotonic() - t0 < _BOUND_S


def test_fault_kinds_cover_the_failover_benchmark_list() -> None:
    kinds = set(PRE_FIRST_TOKEN) | set(MID_STREAM) | set(SLOW) | {"http_400"}
    assert len(kinds) >= 16
