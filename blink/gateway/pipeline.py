"""THE generation pipeline: every generation, from any door, passes the same stages in one call.

HTTP routes, each turn of a voice socket and each line of a batch call
``GenerationPipeline.run(principal, request, directives)``. Before this object existed the batch
executor called the backend directly and the voice adapter re-implemented part of the front, so
a key limited to one model, two requests a minute or a spent budget could batch around all of
it. Now there is one order, for everyone:

    admission: principal (annotated first, so every refusal's log line names the key)
               -> model permission (403) -> priority lane authorization (403)
               -> monthly budget (429) -> per-key sequence quota (429) -> rate limit (429)
    then:      safety guard -> exact/semantic cache (+ head start) -> routing -> backend

The live source is the model server's stream inside this request's stream middleware
(blink/backends/base.py: ``StreamMiddleware``; the safety guard) or the head start's opened call:
per-request behaviour wraps the stream, never the server, so nothing here fakes health or load.

``run`` returns a ``Generation``: either a cache replay or a live source, plus the hooks that
run once the answer is complete (cache fill, token charge, cost, safety after-check). Callers
only render it: ``GenerationResponse`` / ``CachedReplayResponse`` for HTTP, ``Generation.stream``
for the voice socket and batch lines. The sequence lease taken at admission is given back when
the response ends, however it ends (``Generation.close``, called by whoever renders it).

The server's own idle-lane jobs (gateway/precompute/, ``CacheDirectives.origin`` set) pass the same
stages except the sequence quota and the rate limit, and are never shown to the ``observer`` that
learns from users' cache outcomes.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Protocol

from blink.backends.base import Delta, GenerationRequest, StreamSource, Usage
from blink.backends.registry import BackendRegistry
from blink.gateway.auth.keys import ApiKey, check_model_allowed
from blink.gateway.cache.entry import CachedResponse
from blink.gateway.cache.head_start import HeadStart
from blink.gateway.cache.replay import cached_deltas
from blink.gateway.cache.stage import CacheDirectives, CacheLookup
from blink.gateway.front import ANONYMOUS_KEY, DEFAULT_TENANT, Admission, GatewayFront
from blink.gateway.ratelimit.sequence_quota import NO_LEASE, SequenceLease, SequenceQuota
from blink.gateway.rendering.aggregate import ResponseAggregator
from blink.gateway.user_activity import NO_USER, UserActivity, UserLease
from blink.obs import annotate, lap, stage
from blink.protocol.errors import PermissionDeniedError

log = logging.getLogger("blink.gateway.pipeline")

# Lanes any caller may ask for: the default one (``normal`` is its old alias).
DEFAULT_LANES = frozenset({"interactive", "normal"})


@dataclass(slots=True)
class Directives:
    """How this caller wants the request run, beyond the request itself."""

    cache: CacheDirectives = field(default_factory=CacheDirectives)
    # The lane this door assigns by the server's own choice (batch lines: "batch"); needs no scope.
    server_lane: str | None = None
    # True (voice turns): a lane the key may not use runs at the default lane instead of a 403,
    # so a voice session works for every key but only keys granted the lane jump the queue.
    demote_lane: bool = False


class GenerationObserver(Protocol):
    """Sees users' cache outcomes (gateway/precompute/ learns from them), never the server's own
    idle-lane jobs (``CacheDirectives.origin`` set): a job must not feed the statistics that chose it."""

    def on_hit(self, key: ApiKey | None, req: GenerationRequest, lookup: CacheLookup) -> None: ...

    def on_answer(self, key: ApiKey | None, req: GenerationRequest, lookup: CacheLookup,
                  agg: ResponseAggregator) -> None: ...  # fmt: skip


@dataclass(slots=True, eq=False)
class Generation:
    """What ``run`` admitted: a replay or a live source, and what to do when it is complete."""

    request: GenerationRequest
    admission: Admission
    # A cache hit to replay; then ``source`` is not to be called.
    replay: CachedResponse | None
    # What to stream from: the model server's stream inside this request's middleware (the safety
    # guard), or the call opened during the lookup (head start).
    source: StreamSource
    # Run with the whole response once it was delivered in full; it only schedules work.
    on_complete: Callable[[ResponseAggregator], None] | None
    # Headers that need the whole response's usage (``x-blink-cost-usd``), or None.
    usage_headers: Callable[[Usage | None], list[tuple[bytes, bytes]]] | None
    # The sequences held for this answer: whoever renders it calls ``close`` when it ends, however
    # it ends (GenerationResponse's ``on_close``; ``stream`` below and its callers' ``finally``).
    lease: SequenceLease = NO_LEASE
    # The user request this answer is, in flight for the server's background work to stand aside.
    user: UserLease = NO_USER
    # Run instead of ``on_complete`` when the answer ends before it is whole (the client left, a
    # barge-in, a failure mid-way): the tokens generated so far are still charged (front.py).
    on_abandon: Callable[[ResponseAggregator], None] | None = None

    @property
    def headers(self) -> list[tuple[bytes, bytes]]:
        return self.admission.headers

    def close(self) -> None:
        """Give the sequence lease back and end the request's activity (idempotent: every end
        path may call it)."""
        self.lease.release()
        self.user.release()

    async def stream(self) -> AsyncIterator[Delta]:
        """The answer as deltas, for callers that are not an HTTP response (voice, batch).

        Runs the completion hooks after the last delta; closing it early (a barge-in, a cancelled
        line) aborts the backend call, gives the lease back and charges what was generated
        (``on_abandon``). A generator closed before it ever ran runs no ``finally``: callers also
        call ``close`` in their own.
        """
        agg: ResponseAggregator | None = None
        try:
            if self.replay is not None:
                self.close()
                for delta in cached_deltas(self.replay):
                    yield delta
                return
            req = self.request
            wanted = self.on_complete is not None or self.on_abandon is not None
            agg = ResponseAggregator(req.kind, req.num_choices, req.options.logprobs) if wanted else None
            try:
                async with contextlib.aclosing(self.source.stream(req)) as deltas:  # type: ignore[type-var]
                    async for delta in deltas:
                        if agg is not None:
                            agg.add(delta)
                        yield delta
            except Exception:
                if agg is not None and not agg.began:
                    agg = None  # refused before it began (a 4xx, the backend down): nothing to charge
                raise
            self.close()  # before the hooks: the sequences are done once the last delta is in
            whole, agg = agg, None
            if whole is not None and self.on_complete is not None:
                self.on_complete(whole)
        finally:
            self.close()
            if agg is not None and self.on_abandon is not None:
                self.on_abandon(agg)


class GenerationPipeline:
    def __init__(self, registry: BackendRegistry, front: GatewayFront, quota: SequenceQuota | None = None,
                 observer: GenerationObserver | None = None, prefix_cache_scope: str = "tenant") -> None:  # fmt: skip
        self.registry = registry
        # "tenant": a key's requests share the engine's prefix cache with its tenant's only.
        self.prefix_cache_scope = prefix_cache_scope
        self.front = front
        self.quota = quota or SequenceQuota(0)
        # Told of each finished generation when pre-computation is on (serve.py).
        self.observer = observer
        # Users' requests in flight: pre-computation waits for quiet before spending CPU.
        self.activity = UserActivity()

    async def run(self, principal: ApiKey | None, req: GenerationRequest, directives: Directives) -> Generation:
        """Admit ``req`` for ``principal`` (None: API keys are off) and open its answer.

        Raises the ``BlinkError`` of the first stage that refuses; nothing is held after a refusal.
        """
        # Batch lines are not waited for: the engine already runs idle work only when they are done.
        user = NO_USER if directives.cache.origin or _is_batch(req, directives) else self.activity.begin()
        try:
            gen = await self._run(principal, req, directives)
        except BaseException:
            user.release()
            raise
        if gen.replay is not None:
            user.release()
        else:
            gen.user = user
        return gen

    async def _run(self, principal: ApiKey | None, req: GenerationRequest, directives: Directives) -> Generation:
        front = self.front
        adm = self._principal(principal, req.model, directives)
        check_model_allowed(principal, req.model)
        if principal is not None and self.prefix_cache_scope == "tenant":
            req.cache_scope = principal.tenant
        backend = self.registry.resolve(req.model)
        annotate(backend=backend.name)
        lap("resolve")
        self._authorize_lane(principal, req, directives)
        key_id = adm.key.key_id if adm.key is not None else ANONYMOUS_KEY
        if front.cost is not None:  # a spent monthly budget: 429 budget_exceeded, before the rate limit
            front.cost.check(key_id)
        n = req.num_choices  # each choice of each prompt is one engine sequence
        # The server's own idle-lane jobs keep the key's model permission and budget, but take
        # nothing from its sequence quota or rate limit: speculative work must never 429 the user
        # it is done for (the idle lane itself keeps it off the engine's user slots).
        internal = bool(directives.cache.origin)
        # The quota before the rate limit: it can be given back, a counted request cannot.
        lease = NO_LEASE if internal else self.quota.acquire(principal, n)
        try:
            if front.limiter is not None and not internal:
                with stage("ratelimit"):
                    rpm, tpm = (principal.requests_per_minute, principal.tokens_per_minute) if principal else (0, 0)
                    adm.ticket = await front.limiter.admit(key_id, rpm, tpm, req.model, n)
                adm.headers += adm.ticket.headers
            guarded = front.guard(backend, req.model)
            replay = await self._lookup(adm, req, guarded)
        except BaseException:
            lease.release()
            raise
        observer = None if internal or adm.cache is None else self.observer
        if replay is not None:
            lease.release()
            if observer is not None and adm.cache is not None:
                try:
                    observer.on_hit(principal, req, adm.cache)
                except Exception:  # what learns from a hit never fails the hit
                    log.exception("generation observer failed")
            return Generation(req, adm, replay, guarded, None, None)
        source: StreamSource = adm.head_start or guarded
        on_complete = front.on_complete(adm, req)
        if observer is not None and adm.cache is not None and adm.cache.fill:
            on_complete = _observed(on_complete, observer, principal, req, adm.cache)
        return Generation(req, adm, None, source, on_complete, front.usage_headers(adm), lease,
                          on_abandon=front.on_abandon(adm, req))

    @staticmethod
    def _principal(key: ApiKey | None, model: str, directives: Directives) -> Admission:
        """The admission record, with the key in the request log before any check can fail."""
        if key is not None:
            annotate(key_id=key.key_id, model=model)
        else:
            annotate(model=model)
        return Admission(key, key.tenant if key else DEFAULT_TENANT, model, directives.cache)

    @staticmethod
    def _authorize_lane(key: ApiKey | None, req: GenerationRequest, directives: Directives) -> None:
        lane = req.priority
        if (key is None or lane is None or lane in DEFAULT_LANES or lane == directives.server_lane
                or key.may_use_priority(lane)):
            return
        if directives.demote_lane:
            req.priority = None
            return
        raise PermissionDeniedError(
            f"This API key may not use priority '{lane}' (it needs the scope 'priority:{lane}'); "
            "omit 'x-blink-priority' to run at the default priority.",
            param="x-blink-priority", code="priority_not_allowed",
        )

    async def _lookup(self, adm: Admission, req: GenerationRequest, source: StreamSource) -> CachedResponse | None:
        """A cached answer, or None (then ``adm`` carries what the fill needs).

        With ``cache.semantic.head_start`` the backend call opens while the embedding runs
        (``adm.head_start``) and is dropped on a hit (head_start.py says what that costs).
        """
        front = self.front
        cache = front.cache
        if cache is None:
            return None
        head = cache.settings.semantic.head_start
        try:
            with stage("cache"):
                adm.cache = await cache.lookup(req, adm.tenant, adm.directives,
                                               partial(_head_start, adm, source, req) if head else None)
        except BaseException:
            _drop_head_start(adm, front)
            raise
        annotate(cache=adm.cache.outcome)
        adm.headers += adm.cache.headers()
        entry = adm.cache.entry
        if entry is None:
            return None
        _drop_head_start(adm, front)
        if front.cost is not None:  # a hit costs nothing; what the backend would have cost is a saving
            key_id = adm.key.key_id if adm.key is not None else ANONYMOUS_KEY
            adm.headers += front.cost.cache_hit(key_id, adm.model, entry.prompt_tokens, entry.completion_tokens)
        return entry


def _is_batch(req: GenerationRequest, directives: Directives) -> bool:
    return "batch" in (req.priority, directives.server_lane)


def _observed(
    inner: Callable[[ResponseAggregator], None] | None, observer: GenerationObserver, key: ApiKey | None,
    req: GenerationRequest, lookup: CacheLookup,
) -> Callable[[ResponseAggregator], None]:  # fmt: skip
    def done(agg: ResponseAggregator) -> None:
        if inner is not None:
            inner(agg)
        try:
            observer.on_answer(key, req, lookup, agg)
        except Exception:  # what learns from a response never fails the response
            log.exception("generation observer failed")

    return done


def _head_start(adm: Admission, source: StreamSource, req: GenerationRequest) -> None:
    adm.head_start = HeadStart(source, req)


def _drop_head_start(adm: Admission, front: GatewayFront) -> None:
    """A hit (or a failed lookup) makes the opened call useless: cancel it off the request path."""
    if adm.head_start is not None and front.cache is not None:
        front.cache.in_background(adm.head_start.discard())
        adm.head_start = None
