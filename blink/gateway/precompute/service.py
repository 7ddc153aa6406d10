"""The pre-computation service: learns from users' cache outcomes, runs jobs one at a time.

The pipeline calls ``on_hit`` / ``on_answer`` (its ``GenerationObserver``) after users' requests;
those only record and enqueue, never await, so they add nothing to a request's path. One worker
task runs the queue, one job at a time, in the engine's idle lane: a second concurrent job could
only wait behind the first in that lane, while holding KV blocks a user might need.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Protocol

import orjson

from blink.backends.base import GenerationRequest
from blink.backends.request_body import openai_body
from blink.config.precompute import PrecomputeSettings
from blink.gateway.auth.keys import ApiKey
from blink.gateway.cache import keys
from blink.gateway.cache.stage import CacheLookup
from blink.gateway.front import DEFAULT_TENANT
from blink.gateway.http.dispatch import Routes
from blink.gateway.precompute.budget import TokenBudget
from blink.gateway.precompute.flows import FlowModel
from blink.gateway.precompute.ledger import HotEntries
from blink.gateway.precompute.metrics import PrecomputeStats
from blink.gateway.precompute.recipe import CHAT, COMPLETIONS, Recipe
from blink.gateway.precompute.runner import JobResult
from blink.gateway.precompute.storage import LiveEntries
from blink.gateway.rendering.aggregate import ResponseAggregator
from blink.tasks import cancel_and_wait

log = logging.getLogger("blink.gateway.precompute")

REFRESH = "refresh"
PREDICT = "predict"
# Roles whose messages define a flow's scope (the "system prompt" of a conversation).
_SCOPE_ROLES = frozenset({"system", "developer"})


@dataclass(slots=True, frozen=True)
class Job:
    kind: str
    recipe: Recipe
    # Refresh: the tracked entry to extend once regenerated.
    ns: str = ""
    query: str = ""


class JobRunner(Protocol):
    """What the worker calls (runner.RecipeRunner)."""

    async def run(self, recipe: Recipe, kind: str, lookup: bool) -> JobResult: ...


class PrecomputeService:
    def __init__(self, settings: PrecomputeSettings, ttl_s: float, clock: Callable[[], float] = time.time) -> None:
        self.settings = settings
        self.ttl_s = ttl_s
        self._clock = clock
        self.stats = PrecomputeStats()
        self.budget = TokenBudget(settings.tokens_per_hour)
        self.stats.budget_left = self.budget.capacity
        self.hot = HotEntries(settings.max_tracked)
        self.flows = FlowModel(settings.cluster_similarity, settings.max_clusters, settings.max_scopes)
        self.predicted = LiveEntries(settings.max_predicted)
        # Conversation namespace a turn's answer opens -> the cluster of the question it answered.
        self._follow: OrderedDict[str, tuple[str, int]] = OrderedDict()
        self._queue: asyncio.Queue[Job] = asyncio.Queue(settings.max_queue)
        self._runner: JobRunner | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self.router = Routes()  # no endpoints: an app service for its lifecycle only
        self.body_limits: dict[str, int] = {}

    def attach(self, runner: JobRunner) -> None:
        """Given once the app's pipeline exists (serve.py): jobs wait in the queue until then."""
        self._runner = runner

    # -- AppService -------------------------------------------------------------------------------

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._tasks.append(loop.create_task(self._work()))
        if self.settings.refresh:
            self._tasks.append(loop.create_task(self._scan()))

    async def aclose(self) -> None:
        await cancel_and_wait(self._tasks)
        self._tasks.clear()

    # -- GenerationObserver -----------------------------------------------------------------------

    def on_hit(self, key: ApiKey | None, req: GenerationRequest, lookup: CacheLookup) -> None:
        # After the replay has started: a hit's own path stays the cache's few milliseconds.
        asyncio.get_running_loop().call_soon(self._hit, key, req, lookup)

    def _hit(self, key: ApiKey | None, req: GenerationRequest, lookup: CacheLookup) -> None:
        entry = lookup.entry
        if entry is None:
            return
        if entry.precomputed:
            self.stats.hits[entry.precomputed] += 1
        if self.settings.refresh:
            self.hot.hit(lookup.ns, entry.query)
        if self.settings.predict and req.kind == "chat" and req.messages is not None and len(entry.choices) == 1:
            # A replayed turn opens the next one as much as a generated one: the flow goes on.
            _, query = keys.split_query(req)
            recipe = Recipe(key.key_id if key is not None else None, CHAT, _copy(openai_body(req)),
                            entry.prompt_tokens + entry.completion_tokens)
            self._learn(key, req, lookup, query, entry.choices[0].text, entry.completion_tokens, recipe)

    def on_answer(self, key: ApiKey | None, req: GenerationRequest, lookup: CacheLookup,
                  agg: ResponseAggregator) -> None:  # fmt: skip
        if agg.usage is None or req.num_choices != 1:
            return
        recipe = Recipe(key.key_id if key is not None else None, CHAT if req.kind == "chat" else COMPLETIONS,
                        _copy(openai_body(req)), agg.usage.total_tokens)
        if self.settings.refresh:
            self.hot.filled(lookup.ns, lookup.query, recipe, self._clock() + self.ttl_s)
        if self.settings.predict and req.kind == "chat" and req.messages is not None:
            rendered = agg.render("", req.model, 0)
            choice = rendered["choices"][0]
            answer = choice.get("message", {}).get("content")
            if choice.get("finish_reason") is not None and isinstance(answer, str):
                self._learn(key, req, lookup, lookup.query, answer, agg.usage.completion_tokens, recipe)

    # -- predict ----------------------------------------------------------------------------------

    def _learn(self, key: ApiKey | None, req: GenerationRequest, lookup: CacheLookup, query: str, answer: str,
               answer_tokens: int, recipe: Recipe) -> None:  # fmt: skip
        tenant = key.tenant if key is not None else DEFAULT_TENANT
        context, _ = keys.split_query(req)
        scope = keys.namespace(tenant, req, [m for m in context if m.get("role") in _SCOPE_ROLES])
        # A semantic hit's lookup carries no vector; the request keeps the one the lookup computed.
        vec = lookup.vec if lookup.vec is not None else req.embedding
        cluster = self.flows.assign(scope, vec, query)
        before = self._follow.pop(lookup.ns, None)
        if cluster is None:
            return
        if before is not None and before[0] == scope:
            self.flows.observe(scope, before[1], cluster)
        messages = [*(req.messages or []), {"role": "assistant", "content": answer}]
        # The namespace the conversation's next turn will look up in: its context is this turn's
        # messages plus this answer, whatever the next question is.
        probe = replace(req, messages=[*messages, {"role": "user", "content": ""}])
        next_ns = keys.namespace(tenant, probe, keys.split_query(probe)[0])
        self._follow[next_ns] = (scope, cluster)
        while len(self._follow) > self.settings.max_tracked:
            self._follow.popitem(last=False)
        question = self.flows.likely_next(scope, cluster, self.settings.predict_min_count,
                                          self.settings.predict_min_share)
        if question is None:
            return
        body = {**recipe.body, "messages": [*messages, {"role": "user", "content": question}]}
        # The next turn's prompt is this one's plus the answer; its completion about this one's.
        self._enqueue(Job(PREDICT, Recipe(recipe.key_id, CHAT, body, recipe.tokens + 2 * answer_tokens)))

    # -- refresh ----------------------------------------------------------------------------------

    async def _scan(self) -> None:
        while True:
            await asyncio.sleep(self.settings.refresh_interval_s)
            self.scan_once()

    def scan_once(self) -> int:
        """Enqueue the hot entries now due; returns how many were queued."""
        s = self.settings
        room = s.max_queue - self._queue.qsize()
        due = self.hot.take_due(self._clock(), s.refresh_lead_s, s.refresh_min_hits, room)
        for ns, query, recipe in due:
            self._enqueue(Job(REFRESH, recipe, ns, query))
        return len(due)

    # -- the worker -------------------------------------------------------------------------------

    def _enqueue(self, job: Job) -> None:
        try:
            self._queue.put_nowait(job)
        except asyncio.QueueFull:
            self.stats.skipped[(job.kind, "queue_full")] += 1

    async def _work(self) -> None:
        while True:
            job = await self._queue.get()
            try:
                await self.run_job(job)
            except Exception:  # one bad job never stops the worker
                log.exception("precompute job failed")

    async def run_job(self, job: Job) -> JobResult | None:
        """Run one job within the bounds; None when a bound stopped it before it ran."""
        runner = self._runner
        if runner is None:
            return None
        now = self._clock()
        if job.kind == PREDICT and self.predicted.live(now) >= self.predicted.limit:
            self.stats.skipped[(job.kind, "storage")] += 1
            return None
        estimate = max(1, job.recipe.tokens)
        if not self.budget.reserve(estimate):
            self.stats.skipped[(job.kind, "budget")] += 1
            self.stats.budget_left = self.budget.level
            return None
        result = await runner.run(job.recipe, job.kind, job.kind == PREDICT)
        self.budget.settle(estimate, result.tokens)
        self.stats.budget_left = self.budget.level
        self.stats.jobs[(job.kind, result.outcome)] += 1
        self.stats.tokens[job.kind] += result.tokens
        if result.outcome == "done":
            expires_at = self._clock() + self.ttl_s
            if job.kind == PREDICT:
                self.predicted.admit(now, expires_at)
            else:
                self.hot.refreshed(job.ns, job.query, expires_at)
        return result


def _copy(body: dict[str, Any]) -> dict[str, Any]:
    """A deep copy of a request body (JSON already): later stages may edit the request's own."""
    copied: dict[str, Any] = orjson.loads(orjson.dumps(body))
    return copied
