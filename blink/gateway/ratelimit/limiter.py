"""Requests/minute and tokens/minute per API key and per model, moving window (``limits``).

Storage is in-process (``memory://``) by default, or Redis (``redis://``) so several gateway
replicas share one count. With Redis, every admission is bounded by ``timeout_s``; when Redis
errs or is slower, the request is admitted (``fail_open``, the default) or refused with 503, the
error is counted in ``blink_store_errors_total{store="ratelimit"}``, and the storage sits out a
second before it is tried again. Request limits are checked and counted before the backend is
called; token limits are checked before (a key already over its budget is refused) and
counted after the response, with the real prompt + completion tokens. A request for ``n``
choices counts ``n`` requests: it is ``n`` generations for the backend, so ``n=20`` under a
2-requests-per-minute key is refused, not admitted as one.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Awaitable, Iterable
from dataclasses import dataclass, field
from typing import TypeVar

from limits import RateLimitItem, RateLimitItemPerMinute
from limits.aio.strategies import MovingWindowRateLimiter
from limits.storage import storage_from_string
from limits.util import WindowStats

from blink.config.gateway import RateLimitSettings
from blink.gateway.ratelimit.window import LocalMovingWindow
from blink.gateway.storage.errors import StoreErrorSink
from blink.protocol.errors import OverloadedError, RateLimitError

log = logging.getLogger("blink.ratelimit")
T = TypeVar("T")

# After a storage error the limiter decides without Redis for this long (one probe per second).
_STORE_BACKOFF_S = 1.0
# Limit sets remembered by (key, its limits, model); past it the memory starts over. Far above the
# keys x models one gateway serves.
_MAX_LIMIT_SETS = 10_000
# The x-ratelimit-* header names per kind, encoded once.
_HEADER_NAMES = {
    kind: tuple(f"x-ratelimit-{what}-{kind}".encode() for what in ("limit", "remaining", "reset"))
    for kind in ("requests", "tokens")
}


@dataclass(slots=True)
class _Limit:
    item: RateLimitItem
    ids: tuple[str, ...]
    kind: str  # "requests" | "tokens"


@dataclass(slots=True)
class RateLimitTicket:
    """What one admitted request owes: its token limits, to be charged after the response."""

    token_limits: list[_Limit] = field(default_factory=list)
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)


def _async_uri(uri: str) -> str:
    # limits names its asyncio storages "async+redis://"; users write plain "redis://".
    return uri if uri.startswith("async+") else f"async+{uri}"


class RateLimiter:
    def __init__(self, settings: RateLimitSettings, errors: StoreErrorSink | None = None) -> None:
        self.settings = settings
        self.errors = errors
        # The in-process storage cannot fail or stall; only a remote one is guarded.
        self._guarded = not settings.storage_uri.startswith(("memory", "async+memory"))
        self._down_until = 0.0
        # In-process counts use our own O(1) moving window (window.py says why).
        self._local = None if self._guarded else LocalMovingWindow()
        self._limiter: MovingWindowRateLimiter | LocalMovingWindow = (
            MovingWindowRateLimiter(storage_from_string(_async_uri(settings.storage_uri)))
            if self._local is None
            else self._local
        )
        self._pending: set[asyncio.Task[None]] = set()
        # The limits that apply, by (key id, key rpm, key tpm, model): the same few every request.
        self._limit_sets: dict[tuple[str, int, int, str], list[_Limit]] = {}

    def _limits(self, key_id: str, key_rpm: int, key_tpm: int, model: str) -> list[_Limit]:
        s = self.settings
        out: list[_Limit] = []
        rpm = key_rpm or s.requests_per_minute
        tpm = key_tpm or s.tokens_per_minute
        if rpm:
            out.append(_Limit(RateLimitItemPerMinute(rpm, namespace="blink-key-req"), (key_id,), "requests"))
        if tpm:
            out.append(_Limit(RateLimitItemPerMinute(tpm, namespace="blink-key-tok"), (key_id,), "tokens"))
        m = s.models.get(model)
        if m is not None and m.requests_per_minute:
            out.append(_Limit(RateLimitItemPerMinute(m.requests_per_minute, namespace="blink-model-req"), (model,), "requests"))
        if m is not None and m.tokens_per_minute:
            out.append(_Limit(RateLimitItemPerMinute(m.tokens_per_minute, namespace="blink-model-tok"), (model,), "tokens"))
        return out

    async def admit(self, key_id: str, key_rpm: int, key_tpm: int, model: str, sequences: int = 1) -> RateLimitTicket:
        """Count one request of ``sequences`` choices (``n``) as that many requests; raise 429
        (with ``retry-after`` and ``x-ratelimit-*``) when over."""
        limits = self._limit_sets.get((key_id, key_rpm, key_tpm, model))
        if limits is None:
            if len(self._limit_sets) >= _MAX_LIMIT_SETS:
                self._limit_sets.clear()
            limits = self._limit_sets[(key_id, key_rpm, key_tpm, model)] = self._limits(key_id, key_rpm, key_tpm, model)
        ticket = RateLimitTicket(token_limits=[lim for lim in limits if lim.kind == "tokens"])
        if not limits:
            return ticket
        if self._local is not None:
            return await self._admit_local(self._local, limits, ticket, sequences)
        if time.monotonic() < self._down_until:
            return self._without_store(ticket)
        try:
            return await asyncio.wait_for(self._admit(limits, ticket, sequences), self.settings.timeout_s)
        except RateLimitError:
            raise
        except Exception as exc:  # storage error or timeout: decided by fail_open, never a 500
            self._store_failed("admit", exc)
            return self._without_store(ticket)

    def _store_failed(self, op: str, exc: BaseException) -> None:
        self._down_until = time.monotonic() + _STORE_BACKOFF_S
        if self.errors is not None:
            self.errors.store_error("ratelimit", op)
        log.warning("rate-limit storage %s failed (%s)", op, type(exc).__name__)

    def _without_store(self, ticket: RateLimitTicket) -> RateLimitTicket:
        if self.settings.fail_open:
            ticket.token_limits = []  # nothing to charge to a store that is down
            return ticket
        raise OverloadedError(
            "Rate limits cannot be checked right now (their store is unavailable); retry shortly.",
            code="ratelimit_store_unavailable", headers={"retry-after": "1"},
        )

    async def _admit(self, limits: list[_Limit], ticket: RateLimitTicket, sequences: int) -> RateLimitTicket:
        # Test every limit first so one that refuses never consumes another's slot; a lone request
        # limit needs no test (its hit checks and counts atomically): one Redis round trip fewer.
        if len(limits) > 1 or limits[0].kind != "requests":
            oks = await self._each(self._limiter.test(lim.item, *lim.ids, cost=_cost(lim, sequences))
                                   for lim in limits)
            for lim, ok in zip(limits, oks, strict=True):
                if not ok:
                    raise await self._refusal(lim)
        for lim in limits:
            if lim.kind == "requests" and not await self._limiter.hit(lim.item, *lim.ids, cost=sequences):
                raise await self._refusal(lim)  # another replica took the last slot since the test
        shown: dict[str, _Limit] = {}
        for lim in limits:  # key limits come first, so the headers describe the key when it has one
            shown.setdefault(lim.kind, lim)
        for headers in await self._each(self._headers(lim) for lim in shown.values()):
            ticket.headers += headers
        return ticket

    async def _admit_local(
        self, window: LocalMovingWindow, limits: list[_Limit], ticket: RateLimitTicket, sequences: int
    ) -> RateLimitTicket:
        """``_admit`` on the in-process window: the same steps, with no coroutine per window call
        (on every request's first-token path; a refusal takes the shared path)."""
        if len(limits) > 1 or limits[0].kind != "requests":
            for lim in limits:
                if not window.test_now(lim.item, lim.ids, _cost(lim, sequences)):
                    raise await self._refusal(lim)
        for lim in limits:
            if lim.kind == "requests" and not window.hit_now(lim.item, lim.ids, sequences):
                raise await self._refusal(lim)
        shown: dict[str, _Limit] = {}
        for lim in limits:
            shown.setdefault(lim.kind, lim)
        for lim in shown.values():
            ticket.headers += _header_values(lim, window.stats_now(lim.item, lim.ids))
        return ticket

    async def _each(self, calls: Iterable[Awaitable[T]]) -> list[T]:
        """Remote storage: concurrently (one round trip of wall time); in-process: in turn (no tasks)."""
        if self._guarded:
            return list(await asyncio.gather(*calls))
        return [await c for c in calls]

    def charge_tokens(self, ticket: RateLimitTicket, tokens: int) -> None:
        """Count a finished response's tokens, in the background."""
        if not ticket.token_limits or tokens <= 0:
            return
        task = asyncio.get_running_loop().create_task(self._charge(ticket.token_limits, tokens))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def _charge(self, token_limits: list[_Limit], tokens: int) -> None:
        for lim in token_limits:
            # A window cannot record more than its amount; the excess would be refused anyway.
            cost = min(tokens, lim.item.amount)
            try:
                await asyncio.wait_for(self._charge_one(lim, cost), max(1.0, self.settings.timeout_s))
            except Exception as exc:
                self._store_failed("charge", exc)

    async def _charge_one(self, lim: _Limit, cost: int) -> None:
        if not await self._limiter.hit(lim.item, *lim.ids, cost=cost):
            stats = await self._limiter.get_window_stats(lim.item, *lim.ids)
            if stats.remaining > 0:
                await self._limiter.hit(lim.item, *lim.ids, cost=stats.remaining)

    async def drain(self) -> None:
        while self._pending:
            await asyncio.gather(*list(self._pending), return_exceptions=True)

    async def _headers(self, lim: _Limit) -> list[tuple[bytes, bytes]]:
        return _header_values(lim, await self._limiter.get_window_stats(lim.item, *lim.ids))

    async def _refusal(self, lim: _Limit) -> RateLimitError:
        headers = await self._headers(lim)
        stats = await self._limiter.get_window_stats(lim.item, *lim.ids)
        retry_after = max(1, math.ceil(stats.reset_time - time.time()))
        scope = "this API key" if lim.ids[0] != "" and "key" in lim.item.namespace else f"model '{lim.ids[0]}'"
        err = RateLimitError(
            f"Rate limit reached for {scope}: {lim.item.amount} {lim.kind} per minute. "
            f"Retry after {retry_after} s.",
            headers={"retry-after": str(retry_after), **{k.decode(): v.decode() for k, v in headers}},
        )
        return err

    async def aclose(self) -> None:
        await self.drain()


def _cost(lim: _Limit, sequences: int) -> int:
    """What admission tests against ``lim``: ``n`` requests; a token limit only needs room left
    (its real cost, every choice's tokens, is charged after the response)."""
    return sequences if lim.kind == "requests" else 1


def _header_values(lim: _Limit, stats: WindowStats) -> list[tuple[bytes, bytes]]:
    limit, remaining, reset = _HEADER_NAMES[lim.kind]
    reset_s = max(0.0, stats.reset_time - time.time())
    return [
        (limit, str(lim.item.amount).encode()),
        (remaining, str(max(0, stats.remaining)).encode()),
        (reset, f"{reset_s:.3f}s".encode()),
    ]
