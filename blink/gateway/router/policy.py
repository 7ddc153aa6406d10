"""The ``RoutingPolicy`` protocol and the chain that asks policies in order.

A policy looks at the request and the tiers and either picks a tier (a ``Route``) or abstains
(``None``) so the next policy decides; the chain's last word is the route's default tier.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from blink.backends.base import GenerationRequest, Load


@dataclass(slots=True)
class TierView:
    """What a policy may know of a tier: its name, cost rank and live load (replicas summed)."""

    name: str
    cost: int
    load: Load
    replicas: int
    available: int  # replicas whose breaker lets traffic through
    concurrency: int = 0  # the tier's admission cap (0 = unlimited)
    ttft_ms: float | None = None  # the router's own TTFT estimate (peak EWMA; None: no sample yet)


@dataclass(slots=True)
class Route:
    tier: str
    policy: str
    detail: str = ""
    # Cascade: start on ``tier``, escalate to these if the first tokens look unsure.
    escalate_to: list[str] = field(default_factory=list)


class RoutingPolicy(Protocol):
    name: str

    async def choose(self, req: GenerationRequest, tiers: Sequence[TierView]) -> Route | None: ...


class PolicyChain:
    """Ask each policy in turn; the first route wins, else the default tier."""

    def __init__(self, policies: Sequence[RoutingPolicy], default_tier: str) -> None:
        self.policies = list(policies)
        self.default_tier = default_tier

    async def choose(self, req: GenerationRequest, tiers: Sequence[TierView]) -> Route:
        for policy in self.policies:
            route = await policy.choose(req, tiers)
            if route is not None:
                return route
        return Route(self.default_tier, "default")


def request_text(req: GenerationRequest) -> str:
    """The prompt as plain text (chat: every message's text parts joined), for rules and classifiers."""
    if req.kind == "completion":
        return req.prompt if isinstance(req.prompt, str) else ""
    parts: list[str] = []
    for message in req.messages or ():
        content = message.get("content")
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts.extend(str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type") == "text")
    return "\n".join(parts)


def last_user_text(req: GenerationRequest) -> str:
    """The latest user turn: what a classifier should judge (the system prompt is the same for all)."""
    if req.kind == "completion":
        return request_text(req)
    for message in reversed(req.messages or ()):
        if message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, str):
                return content
            if isinstance(content, list):
                return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type") == "text")
    return request_text(req)
