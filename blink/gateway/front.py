"""The gateway's stages and their lifecycle: cache, rate limiter, safety, cost accounting.

Authentication itself is ``AuthMiddleware`` (pure ASGI, 401 before the body is read). The order
in which a request passes these stages is not decided here but by ``GenerationPipeline``
(pipeline.py), the one caller; this object owns the stages (start, close, drain) and the hooks
that run once a response is complete (``on_complete``: cache fill, token charge, cost, safety
after-check).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from starlette.datastructures import Headers

from blink.backends.base import GenerationRequest, StreamSource, Usage
from blink.gateway.auth.keys import ApiKey
from blink.gateway.cache.head_start import HeadStart
from blink.gateway.cache.stage import CacheDirectives, CacheLookup, ResponseCache
from blink.gateway.cost.tracker import CostTracker
from blink.gateway.prompt_estimate import estimate_prompt_tokens
from blink.gateway.ratelimit.limiter import RateLimiter, RateLimitTicket
from blink.gateway.rendering.aggregate import ResponseAggregator
from blink.gateway.safety.stage import SafetyStage
from blink.obs.redact import redact

DEFAULT_TENANT = "default"
ANONYMOUS_KEY = "anonymous"


@dataclass(slots=True)
class Admission:
    key: ApiKey | None
    tenant: str
    model: str
    directives: CacheDirectives
    ticket: RateLimitTicket | None = None
    cache: CacheLookup | None = None
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    # The backend call opened during the lookup (``cache.semantic.head_start``), for the response.
    head_start: HeadStart | None = None


class GatewayFront:
    def __init__(
        self,
        cache: ResponseCache | None = None,
        limiter: RateLimiter | None = None,
        safety: SafetyStage | None = None,
        cost: CostTracker | None = None,
    ) -> None:
        self.cache = cache
        self.limiter = limiter
        self.safety = safety
        self.cost = cost

    async def start(self) -> None:
        if self.cache is not None:
            await self.cache.start()

    async def aclose(self) -> None:
        if self.safety is not None:  # first: pending checks may still fill the cache
            await self.safety.aclose()
        if self.limiter is not None:
            await self.limiter.aclose()
        if self.cache is not None:
            await self.cache.aclose()

    @staticmethod
    def directives(raw: dict[str, Any], headers: Headers) -> CacheDirectives:
        """Take the per-request cache switches; removes ``cache`` from the body (not an OpenAI field)."""
        return CacheDirectives.from_request(raw.pop("cache", None), headers.get("cache-control", ""))

    def guard(self, source: StreamSource, model: str) -> StreamSource:
        """The stream as this model's safety mode wants it (inside the guard in blocking mode)."""
        return source if self.safety is None else self.safety.guard(source, model)

    def on_complete(self, adm: Admission, req: GenerationRequest | None = None) -> Callable[[ResponseAggregator], None] | None:
        """The callback GenerationResponse runs after a full response, or None when nothing needs it."""
        fill = self.cache is not None and adm.cache is not None and adm.cache.fill
        safety = self.safety if req is not None else None
        if not (fill or _counts_tokens(adm) or safety or self.cost):
            return None

        def done(agg: ResponseAggregator) -> None:
            if safety is not None and req is not None:  # the verdict decides the fill (flagged: never cached)
                rendered = agg.render("", adm.model, 0)
                safety.after_response(req, adm.model, rendered, self._filler(adm, rendered) if fill else None)
            elif fill and self.cache is not None and adm.cache is not None:
                self.cache.schedule_fill(adm.cache, agg.render("", adm.model, 0))
            self._charge(adm, agg.usage, req.compressed_tokens if req is not None else 0)

        return done

    def on_abandon(self, adm: Admission, req: GenerationRequest) -> Callable[[ResponseAggregator], None] | None:
        """The callback for a response that ended before it was whole: its prompt and the tokens
        delivered still count against the key's token rate limit and spend (never cached, never
        safety-checked: there is no whole answer). The prompt is the backend's count when it told
        one (the embedded engine, on its first delta), else the gateway's estimate (upstreams, or
        a client gone before the first token). None when nothing counts tokens."""
        if not (_counts_tokens(adm) or self.cost):
            return None

        def abandoned(agg: ResponseAggregator) -> None:
            usage = agg.usage_so_far()
            if agg.usage is None and agg.prompt_tokens is None:
                usage.prompt_tokens = estimate_prompt_tokens(req)
            if usage.total_tokens > 0:
                self._charge(adm, usage, 0)

        return abandoned

    def _charge(self, adm: Admission, usage: Usage | None, compressed_tokens: int) -> None:
        """Count a response's tokens against the key's token limits and its spend."""
        if usage is not None and self.limiter is not None and adm.ticket is not None:
            self.limiter.charge_tokens(adm.ticket, usage.total_tokens)  # a no-op without token limits
        if self.cost is not None:
            self.cost.charge(_key_id(adm), adm.model, usage, compressed_tokens)

    def usage_headers(self, adm: Admission) -> Callable[[Usage | None], list[tuple[bytes, bytes]]] | None:
        """Headers computed from a whole response's usage (``x-blink-cost-usd``), or None."""
        cost = self.cost
        if cost is None:
            return None
        return lambda usage: cost.header(adm.model, usage)

    def _filler(self, adm: Admission, rendered: dict[str, Any]) -> Callable[[], None]:
        def fill() -> None:
            if self.cache is not None and adm.cache is not None:
                adm.cache.query = redact(adm.cache.query)  # the stored query never keeps PII
                self.cache.schedule_fill(adm.cache, rendered)

        return fill

    async def drain(self) -> None:
        """Wait for background fills and token charges (tests and shutdown)."""
        if self.safety is not None:  # first: a clean verdict schedules a cache fill
            await self.safety.drain()
        if self.cache is not None:
            await self.cache.drain()
        if self.limiter is not None:
            await self.limiter.drain()


def _counts_tokens(adm: Admission) -> bool:
    """The key has token limits, so its responses' tokens are charged."""
    return adm.ticket is not None and bool(adm.ticket.token_limits)


def _key_id(adm: Admission) -> str:
    return adm.key.key_id if adm.key is not None else ANONYMOUS_KEY
