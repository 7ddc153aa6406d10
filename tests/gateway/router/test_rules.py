"""Rule-based routing: length, keywords, regex, code, tools, images; first match wins."""

from __future__ import annotations

from typing import Any

from blink.backends.base import GenerationRequest, Load, SamplingOptions
from blink.gateway.router.explicit import ExplicitPolicy
from blink.gateway.router.policy import PolicyChain, TierView
from blink.gateway.router.rules import Rule, RulesPolicy

TIERS = [TierView(n, c, Load(), 1, 1) for c, n in enumerate(("small", "medium", "large"))]


def _req(content: Any, **raw: Any) -> GenerationRequest:
    messages = [{"role": "user", "content": content}]
    return GenerationRequest("r", "auto", "chat", SamplingOptions(), messages=messages, extra=raw)


POLICY = RulesPolicy(
    [
        Rule(tier="large", has_images=True),
        Rule(tier="large", has_tools=True),
        Rule(tier="medium", has_code=True),
        Rule(tier="large", keywords=["prove", "theorem"]),
        Rule(tier="medium", regex=r"^translate\b"),
        Rule(tier="large", min_chars=2000),
        Rule(tier="small", max_chars=200),
    ]
)


async def _tier(req: GenerationRequest) -> str | None:
    route = await POLICY.choose(req, TIERS)
    return None if route is None else route.tier


async def test_each_condition_selects_its_tier() -> None:
    image = [{"type": "text", "text": "what is this?"}, {"type": "image_url", "image_url": {"url": "data:,"}}]
    assert await _tier(_req(image)) == "large"
    assert await _tier(_req("weather?", tools=[{"type": "function", "function": {"name": "w"}}])) == "large"
    assert await _tier(_req("fix this:\n```python\ndef f(x):\n    return x\n```")) == "medium"
    assert await _tier(_req("Prove the theorem of Pythagoras.")) == "large"
    assert await _tier(_req("Translate this to French: good night")) == "medium"
    assert await _tier(_req("word " * 500)) == "large"
    assert await _tier(_req("hi!")) == "small"


async def test_no_match_abstains_and_the_chain_falls_back_to_the_default() -> None:
    req = _req("a medium-length question " * 10)
    assert await POLICY.choose(req, TIERS) is None
    route = await PolicyChain([ExplicitPolicy(), POLICY], default_tier="medium").choose(req, TIERS)
    assert (route.tier, route.policy) == ("medium", "default")


async def test_keywords_match_whole_words_only() -> None:
    assert await _tier(_req("improve my essay " + "x" * 250)) is None  # "prove" inside "improve"


async def test_explicit_tier_wins_first() -> None:
    req = _req("hi")
    req.tier = "large"
    route = await PolicyChain([ExplicitPolicy(), POLICY], default_tier="small").choose(req, TIERS)
    assert (route.tier, route.policy) == ("large", "explicit")
