"""Routing through a real gateway: latency budget, cascade escalation, explicit tier, headers."""

from __future__ import annotations

import httpx
import openai
import pytest
from fault_upstream import FaultUpstream
from live_server import LiveServer
from routed_gateway import FULL, client, routed_gateway, stream_chat
from upstream_server import FakeUpstream

from blink.backends.base import Load
from blink.gateway.router.budget import LatencyBudgetPolicy, predicted_ttft_ms
from blink.gateway.router.policy import TierView


async def test_budget_policy_picks_the_cheapest_tier_that_fits() -> None:
    from blink.backends.base import GenerationRequest, SamplingOptions

    small = TierView("small", 0, Load(running=4, waiting=6), 2, 2, ttft_ms=100.0)
    large = TierView("large", 1, Load(running=1, waiting=0), 2, 2, ttft_ms=250.0)
    assert predicted_ttft_ms(small, 500.0) == 100.0 * (1 + 6 / 2)
    req = GenerationRequest("r", "auto", "chat", SamplingOptions(), messages=[])
    policy = LatencyBudgetPolicy()
    assert await policy.choose(req, [small, large]) is None  # no budget: no opinion
    req.latency_budget_ms = 300.0
    assert (await policy.choose(req, [small, large])).tier == "large"  # type: ignore[union-attr]
    req.latency_budget_ms = 1000.0
    assert (await policy.choose(req, [small, large])).tier == "small"  # type: ignore[union-attr]
    req.latency_budget_ms = 10.0
    assert (await policy.choose(req, [small, large])).tier == "large"  # none fits: the fastest (250 < 400)


def test_budget_routing_moves_to_the_fast_tier_when_the_cheap_one_is_slow(upstream: FakeUpstream) -> None:
    cheap = FaultUpstream(tokens=8, fault="slow_first", slow_s=0.3)
    tiers = [
        {"name": "cheap", "replicas": ["cheap"], "cost": 0, "ttft_prior_ms": 50},
        {"name": "fast", "replicas": ["fast"], "cost": 1, "ttft_prior_ms": 50},
    ]
    with LiveServer(cheap) as up:
        urls = {"cheap": f"{up.url}/v1", "fast": upstream.base_url}
        with routed_gateway(tiers, urls, policies=["explicit", "latency_budget"], default_tier="cheap",
                            first_token_timeout_s=5) as gw:  # fmt: skip
            c = client(gw)
            assert stream_chat(c) == (FULL, "stop")  # no budget: the default (cheap) tier
            assert cheap.hits == 1  # ...which measured ~300 ms TTFT
            before = len(upstream.requests)
            budget = {"extra_headers": {"x-blink-latency-budget-ms": "150"}}
            for _ in range(3):
                assert stream_chat(c, **budget) == (FULL, "stop")
            assert cheap.hits == 1 and len(upstream.requests) == before + 3
            assert stream_chat(c, extra_headers={"x-blink-latency-budget-ms": "2000"}) == (FULL, "stop")
            assert cheap.hits == 2  # a loose budget goes back to the cheap tier


@pytest.mark.parametrize("small_fault", ["unsure", None])
def test_cascade_escalates_only_when_the_small_model_is_unsure(small_fault: str | None, upstream: FakeUpstream) -> None:
    small = FaultUpstream(tokens=8, fault=small_fault)
    tiers = [{"name": "small", "replicas": ["small"]}, {"name": "large", "replicas": ["large"]}]
    with LiveServer(small) as up:
        urls = {"small": f"{up.url}/v1", "large": upstream.base_url}
        with routed_gateway(tiers, urls, policies=["cascade"]) as gw:
            before = len(upstream.requests)
            stream = client(gw).chat.completions.create(
                model="auto", messages=[{"role": "user", "content": "hi"}], stream=True
            )
            chunks = [ch for ch in stream if ch.choices]
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks)
    assert text == FULL
    assert small.hits == 1 and small.requests[-1]["logprobs"] is True  # probed with logprobs
    assert len(upstream.requests) == before + (1 if small_fault == "unsure" else 0)
    assert all(ch.choices[0].logprobs is None for ch in chunks)  # the client did not ask for them


def test_explicit_tier_and_header_validation(upstream: FakeUpstream) -> None:
    other = FakeUpstream(tokens=8)
    tiers = [{"name": "a", "replicas": ["a"]}, {"name": "b", "replicas": ["b"]}]
    with LiveServer(other) as up, routed_gateway(tiers, {"a": upstream.base_url, "b": f"{up.url}/v1"}) as gw:
        c = client(gw)
        assert stream_chat(c, extra_headers={"x-blink-tier": "b"}) == (FULL, "stop")
        assert len(other.requests) == 1
        with pytest.raises(openai.BadRequestError):
            stream_chat(c, extra_headers={"x-blink-tier": "nope"})
        for header, value in (("x-blink-priority", "urgent"), ("x-blink-latency-budget-ms", "-5")):
            r = httpx.post(f"{gw.url}/v1/chat/completions", headers={header: value},
                           json={"model": "auto", "messages": [{"role": "user", "content": "hi"}]})  # fmt: skip
            assert r.status_code == 400 and r.json()["error"]["param"] == header
        assert stream_chat(c, extra_headers={"x-blink-priority": "interactive"}) == (FULL, "stop")
