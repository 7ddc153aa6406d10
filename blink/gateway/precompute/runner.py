"""Runs one pre-computation job through the generation pipeline, in the idle lane.

The job's body is validated and mapped as ``/v1/chat/completions`` or ``/v1/completions`` would
map it, then handed to ``GenerationPipeline.run`` as the key it belongs to, resolved now: its
model permission, budget, the safety check and the cache's namespace apply as to the user's own
request (its rate limit and sequence quota are spared: pipeline.py says why). The fill is marked
with the job's kind through ``CacheDirectives.origin``.

Its own CPU work stands aside for users (gateway/user_activity.py): the prompt building and the
lookup's embedding start only once users are quiet, and so does the cache fill (an embedding and a
write), held back from the stream's end; the generation between them is the engine's idle lane.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass

import orjson

from blink.gateway.auth.keys import ApiKey, KeyStore
from blink.gateway.cache.stage import CacheDirectives
from blink.gateway.chat.request_mapping import chat_request, completion_request
from blink.gateway.http.request_parsing import validate
from blink.gateway.pipeline import Directives, GenerationPipeline
from blink.gateway.precompute.recipe import CHAT, Recipe
from blink.gateway.rendering.aggregate import ResponseAggregator
from blink.protocol.chat import ChatCompletionRequest
from blink.protocol.completions import CompletionRequest
from blink.protocol.errors import BlinkError

log = logging.getLogger("blink.gateway.precompute")

IDLE_LANE = "idle"


@dataclass(slots=True)
class JobResult:
    outcome: str  # done | cached | refused | timeout | failed
    tokens: int = 0


class RecipeRunner:
    def __init__(
        self, pipeline: GenerationPipeline, key_store: KeyStore | None, max_tokens_limit: int, timeout_s: float | None,
        quiet_s: float = 0.0,
    ) -> None:  # fmt: skip
        self._pipeline = pipeline
        self._quiet_s = quiet_s
        self._key_store = key_store
        self._max_tokens_limit = max_tokens_limit
        self._timeout_s = timeout_s

    async def run(self, recipe: Recipe, kind: str, lookup: bool) -> JobResult:
        """``lookup`` False regenerates even when the entry is live (refresh); True stops at any
        hit, exact or guarded-semantic, so a prediction already answerable costs nothing."""
        activity = self._pipeline.activity
        try:
            await activity.quiet(self._quiet_s)
            key = await self._principal(recipe.key_id)
            if recipe.key_id is not None and key is None:
                return JobResult("refused")
            raw = orjson.loads(orjson.dumps(recipe.body))  # the mapping may edit it; the recipe may run again
            raw.pop("stream", None)
            raw.pop("stream_options", None)
            model = raw.get("model") or self._pipeline.registry.default_model()
            if recipe.endpoint == CHAT:
                req = chat_request(validate(ChatCompletionRequest, raw), raw, model, self._max_tokens_limit,
                                   self._timeout_s)
            else:
                req = completion_request(validate(CompletionRequest, raw), raw, model, self._max_tokens_limit,
                                         self._timeout_s)
            req.priority = IDLE_LANE
            cache = CacheDirectives(lookup=lookup, store=True, origin=kind)
            agg = ResponseAggregator(req.kind, req.num_choices, req.options.logprobs)
            async with asyncio.timeout(self._timeout_s):
                gen = await self._pipeline.run(key, req, Directives(cache, server_lane=IDLE_LANE))
                try:
                    if gen.replay is not None:
                        return JobResult("cached")
                    fill, gen.on_complete = gen.on_complete, None  # run below, once users are quiet
                    async with contextlib.aclosing(gen.stream()) as deltas:  # type: ignore[type-var]
                        async for delta in deltas:
                            agg.add(delta)
                finally:
                    gen.close()
            if fill is not None:
                await activity.quiet(self._quiet_s)
                fill(agg)
            return JobResult("done", agg.usage.total_tokens if agg.usage is not None else 0)
        except BlinkError as err:
            log.info("precompute %s job refused: %s", kind, err.message)
            return JobResult("refused")
        except TimeoutError:  # users kept the engine busy the whole time: the lane worked as meant
            return JobResult("timeout")
        except Exception:
            log.exception("precompute %s job failed", kind)
            return JobResult("failed")

    async def _principal(self, key_id: str | None) -> ApiKey | None:
        if self._key_store is None or key_id is None:
            return None
        return await self._key_store.aby_id(key_id)
