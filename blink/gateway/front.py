"""The front stages a generation request passes before a backend: permission, rate limit, cache.

Authentication itself is ``AuthMiddleware`` (pure ASGI, 401 before the body is read); what
needs the request body (the model, the cache key) happens here, called by the routes:
``directives`` -> ``admit`` (403, 429) -> ``lookup`` (replay a hit) -> the backend, whose
finished response ``on_complete`` hands to the cache fill and the token counter. Each stage is
timed with the obs stage API (``blink_stage_duration_seconds{stage="ratelimit"|"cache"}``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import Response

from blink.backends.base import Backend, GenerationRequest, Usage
from blink.gateway.aggregate import ResponseAggregator
from blink.gateway.auth import PRINCIPAL_STATE_KEY, ApiKey, check_model_allowed
from blink.gateway.cache.head_start import HeadStart
from blink.gateway.cache.replay import CachedReplayResponse
from blink.gateway.cache.stage import CacheDirectives, CacheLookup, ResponseCache
from blink.gateway.cost_tracker import CostTracker
from blink.gateway.ratelimit import RateLimiter, RateLimitTicket
from blink.gateway.safety.stage import SafetyStage
from blink.obs import annotate, stage
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

    async def admit(self, request: Request, model: str, directives: CacheDirectives) -> Admission:
        key: ApiKey | None = request.scope.get("state", {}).get(PRINCIPAL_STATE_KEY)
        check_model_allowed(key, model)
        adm = Admission(key, key.tenant if key else DEFAULT_TENANT, model, directives)
        if key is not None:
            annotate(key_id=key.key_id)
        if self.cost is not None:  # a spent monthly budget: 429 budget_exceeded, before the rate limit
            self.cost.check(_key_id(adm))
        if self.limiter is not None:
            with stage("ratelimit"):
                rpm, tpm = (key.requests_per_minute, key.tokens_per_minute) if key else (0, 0)
                adm.ticket = await self.limiter.admit(key.key_id if key else ANONYMOUS_KEY, rpm, tpm, model)
            adm.headers += adm.ticket.headers
        return adm

    async def lookup(
        self, adm: Admission, req: GenerationRequest, *, stream: bool, include_usage: bool,
        backend: Backend | None = None,
    ) -> Response | None:
        """A replay of a cached response, or None (then ``adm`` carries what the fill needs).

        With ``cache.semantic.head_start`` and a ``backend``, its call opens while the embedding
        runs (``adm.head_start``) and is dropped on a hit (head_start.py says what that costs).
        """
        cache = self.cache
        if cache is None:
            return None
        head = backend is not None and cache.settings.semantic.head_start
        try:
            with stage("cache"):
                adm.cache = await cache.lookup(req, adm.tenant, adm.directives,
                                               partial(_head_start, adm, backend, req) if head else None)
        except BaseException:
            _drop_head_start(cache, adm)
            raise
        annotate(cache=adm.cache.outcome)
        adm.headers += adm.cache.headers()
        if adm.cache.entry is None:
            return None
        _drop_head_start(cache, adm)
        if self.cost is not None:  # a hit costs nothing; what the backend would have cost is a saving
            adm.headers += self.cost.cache_hit(_key_id(adm), adm.model, adm.cache.entry.prompt_tokens,
                                               adm.cache.entry.completion_tokens)
        return CachedReplayResponse(req, adm.cache.entry, stream=stream, include_usage=include_usage, headers=adm.headers)

    def guard(self, backend: Backend, model: str) -> Backend:
        """The backend as this model's safety mode wants it (wrapped in blocking mode)."""
        return backend if self.safety is None else self.safety.guard(backend, model)

    def on_complete(self, adm: Admission, req: GenerationRequest | None = None) -> Callable[[ResponseAggregator], None] | None:
        """The callback GenerationResponse runs after a full response, or None when nothing needs it."""
        fill = self.cache is not None and adm.cache is not None and adm.cache.fill
        charge = adm.ticket is not None and bool(adm.ticket.token_limits)
        safety = self.safety if req is not None else None
        cost = self.cost
        if not (fill or charge or safety or cost):
            return None

        def done(agg: ResponseAggregator) -> None:
            if safety is not None and req is not None:  # the verdict decides the fill (flagged: never cached)
                rendered = agg.render("", adm.model, 0)
                safety.after_response(req, adm.model, rendered, self._filler(adm, rendered) if fill else None)
            elif fill and self.cache is not None and adm.cache is not None:
                self.cache.schedule_fill(adm.cache, agg.render("", adm.model, 0))
            if charge and self.limiter is not None and adm.ticket is not None and agg.usage is not None:
                self.limiter.charge_tokens(adm.ticket, agg.usage.total_tokens)
            if cost is not None:
                cost.charge(_key_id(adm), adm.model, agg.usage)

        return done

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


def _key_id(adm: Admission) -> str:
    return adm.key.key_id if adm.key is not None else ANONYMOUS_KEY


def _head_start(adm: Admission, backend: Backend, req: GenerationRequest) -> None:
    adm.head_start = HeadStart(backend, req)


def _drop_head_start(cache: ResponseCache, adm: Admission) -> None:
    """A hit (or a failed lookup) makes the opened call useless: cancel it off the request path."""
    if adm.head_start is not None:
        cache.in_background(adm.head_start.discard())
        adm.head_start = None
