"""The safety stage of the request path: which mode a model runs in, and the check after a response.

``async`` (default): nothing happens before or during the response; once its last byte was sent,
the exchange joins a bounded backlog that one background drain checks, a text at a time, only
while the event loop is idle (``IdleGate``), so the checks never hold up another stream. ``blocking``: the backend is wrapped
(``StreamGuard``, stream middleware) so input and output are checked in line. In both modes the cache is filled
only after the verdict, and only with a clean answer without PII (its query stored redacted),
so a flagged answer can never be replayed. Flagged exchanges are logged (redacted), counted and
optionally posted to a webhook.

The idle gate (``IdleGate``): low-priority scheduling on the event loop: wait until the loop has nothing else to do.

asyncio has no task priorities. A timer that fires on time is the signal: the loop was parked in
``epoll`` with no ready callbacks, so no stream is queued behind whatever runs next. A timer
that fires late means other work (tokens, new requests) held the loop, and background work waits
for the next probe. Deferral cannot make work free: past ``max_backlog`` queued jobs the gate
stops waiting, so a saturated gateway still keeps up with its checks instead of growing a queue
without bound.

The webhook: optional report of a flagged exchange: one JSON POST, fire and forget, bounded in time."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from blink.backends.base import GenerationRequest, StreamSource, with_middleware
from blink.gateway.safety.checks import SafetyPipeline, Verdict, finish_reasons, input_text, output_texts
from blink.gateway.safety.stream_guard import CONTENT_FILTER, StreamGuard
from blink.obs.redact import redact

# One probe sleeps this long; epoll rounds timeouts up to whole milliseconds, so 1 ms is the
# shortest sleep the selector honours (and ~1,000 cheap wake-ups/s only while work is queued).
PROBE_S = 0.001
# A probe back within this much of its due time found the loop idle: above epoll's own overshoot,
# below one streamed chunk's callbacks (benchmarks/RESULTS.md, "Figures behind the code's numbers", safety).
IDLE_LAG_S = 0.0002


class IdleGate:
    def __init__(self, max_backlog: int, probe_s: float = PROBE_S, idle_lag_s: float = IDLE_LAG_S) -> None:
        self.max_backlog = max_backlog
        self.probe_s = probe_s
        self.idle_lag_s = idle_lag_s
        # Set while someone waits for the backlog to finish (tests, shutdown): no more waiting.
        self.urgent = False
        self.deferrals = 0  # probes that found the loop busy (how often background work gave way)
        self._streak = False  # the last probe found the loop idle and nothing has happened since

    def activity(self) -> None:
        """A response just ended: its client's next request is likely on its way, so the next
        check waits for a full probe instead of running in the gap before that request lands."""
        self._streak = False

    async def idle(self, backlog: int) -> None:
        """Return once the loop is idle, or at once when urgent or ``backlog`` is at its bound."""
        loop = asyncio.get_running_loop()
        if self.urgent or backlog >= self.max_backlog:
            return
        if self._streak:
            # Inside an idle stretch a yield is enough: straight back means nothing was ready
            # and no I/O had arrived, so the backlog drains at full speed.
            start = loop.time()
            await asyncio.sleep(0)
            if loop.time() - start <= self.idle_lag_s:
                return
            self._streak = False
        while not self.urgent and backlog < self.max_backlog:
            due = loop.time() + self.probe_s
            await asyncio.sleep(self.probe_s)
            if loop.time() - due <= self.idle_lag_s:
                self._streak = True
                return
            self.deferrals += 1


log = logging.getLogger("blink.safety")

# A slow receiver must not pile up tasks: give up after this long.
_TIMEOUT_S = 2.0


class Webhook:
    def __init__(self, url: str) -> None:
        self.url = url
        self._client: httpx.AsyncClient | None = None

    async def post(self, payload: dict[str, Any]) -> None:
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=_TIMEOUT_S)
        try:
            await self._client.post(self.url, json=payload)
        except httpx.HTTPError as exc:
            log.warning("safety webhook %s failed: %s", self.url, exc)

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()


log = logging.getLogger("blink.safety")

# Exchanges waiting for an idle loop before the checks run anyway: a fraction of a second of
# deferred CPU at the checks' cost per exchange (benchmarks/RESULTS.md, "Figures behind the code's numbers", safety),
# and a burst of that many requests.
MAX_BACKLOG = 1024

_Job = tuple[GenerationRequest, str, dict[str, Any], Callable[[], None] | None]


@dataclass(slots=True)
class SafetyCounters:
    checked: int = 0
    flagged: int = 0
    blocked: int = 0
    errors: int = 0
    by_category: dict[str, int] = field(default_factory=dict)

    def count(self, categories: set[str]) -> None:
        self.flagged += 1
        for c in categories:
            self.by_category[c] = self.by_category.get(c, 0) + 1


class SafetyStage:
    def __init__(self, pipeline: SafetyPipeline, mode: str = "async", routes: Mapping[str, str] | None = None,
                 webhook: Webhook | None = None, max_backlog: int = MAX_BACKLOG) -> None:  # fmt: skip
        self.pipeline = pipeline
        self.mode = mode
        self.routes = dict(routes or {})
        self.webhook = webhook
        self.counters = SafetyCounters()
        self.gate = IdleGate(max_backlog)
        self._backlog: deque[_Job] = deque()
        self._drainer: asyncio.Task[None] | None = None
        self._posts: set[asyncio.Task[None]] = set()  # webhook reports: a slow receiver never stalls the drain

    def mode_for(self, model: str) -> str:
        return self.routes.get(model, self.mode)

    def guard(self, source: StreamSource, model: str) -> StreamSource:
        """``source`` as ``model``'s safety mode wants it: inside a ``StreamGuard`` in blocking mode."""
        if self.mode_for(model) != "blocking":
            return source
        return with_middleware(source, StreamGuard(self.pipeline, self._on_block))

    def _on_block(self, categories: set[str]) -> None:
        self.counters.blocked += 1
        self.counters.count(categories)

    def after_response(self, req: GenerationRequest, model: str, rendered: dict[str, Any],
                       on_clean: Callable[[], None] | None) -> None:  # fmt: skip
        """Called once the response's last byte was sent; only queues the exchange (no task, no text work)."""
        if self.mode_for(model) == "off":
            if on_clean is not None:
                on_clean()
            return
        if CONTENT_FILTER in finish_reasons(rendered):
            return  # blocked in line (counted there): never cached
        self._backlog.append((req, model, rendered, on_clean))
        self.gate.activity()
        if self._drainer is None:
            self._drainer = asyncio.get_running_loop().create_task(self._drain())

    def backlog(self) -> int:
        return len(self._backlog)

    async def _drain(self) -> None:
        """One task for the whole backlog, each text checked only when the loop is idle."""
        try:
            while self._backlog:
                await self._check(*self._backlog.popleft())
        finally:
            self._drainer = None

    async def _check(self, req: GenerationRequest, model: str, rendered: dict[str, Any],
                     on_clean: Callable[[], None] | None) -> None:  # fmt: skip
        try:
            prompt = input_text(req)
            answers = output_texts(rendered)
            verdicts = []
            for text in [prompt, *answers]:
                await self.gate.idle(len(self._backlog))  # one text per idle slot
                verdicts.append(await self.pipeline.check(text))
        except Exception:
            self.counters.errors += 1
            log.exception("safety check failed for %s (not cached)", req.request_id)
            return
        self.counters.checked += 1
        verdict = Verdict()
        for v in verdicts:
            verdict.merge(v)
        if verdict.flagged:
            self.counters.count(verdict.categories)
            log.warning("safety flagged %s (%s): %s", req.request_id, model, ", ".join(sorted(verdict.categories)))
            if self.webhook is not None:
                post = asyncio.get_running_loop().create_task(self.webhook.post(_report(req, model, verdict, prompt, answers)))
                self._posts.add(post)
                post.add_done_callback(self._posts.discard)
            return
        if on_clean is not None and not any(v.redacted is not None for v in verdicts[1:]):
            on_clean()  # clean and no PII in the answer: the cache may keep it

    async def drain(self) -> None:
        """Check everything queued now, without waiting for idle moments (tests, shutdown)."""
        self.gate.urgent = True
        try:
            while self._drainer is not None or self._posts:
                await asyncio.gather(*[t for t in (self._drainer, *self._posts) if t is not None], return_exceptions=True)
        finally:
            self.gate.urgent = False

    async def aclose(self) -> None:
        await self.drain()
        if self.webhook is not None:
            await self.webhook.aclose()


def _report(req: GenerationRequest, model: str, verdict: Verdict, prompt: str, answers: list[str]) -> dict[str, Any]:
    return {
        "request_id": req.request_id, "model": model, "time": time.time(),
        "categories": sorted(verdict.categories), "scores": verdict.scores,
        "input": redact(prompt), "output": [redact(a) for a in answers],
    }  # fmt: skip
