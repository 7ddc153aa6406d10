"""The safety stage of the request path: which mode a model runs in, and the check after a response.

``async`` (default): nothing happens before or during the response; once its last byte was sent,
a background task checks the input and the answer. ``blocking``: the backend is wrapped
(``GuardedBackend``) so input and output are checked in line. In both modes the cache is filled
only after the verdict, and only with a clean answer without PII (its query stored redacted),
so a flagged answer can never be replayed. Flagged exchanges are logged (redacted), counted and
optionally posted to a webhook.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from blink.backends.base import Backend, GenerationRequest
from blink.gateway.safety.pipeline import SafetyPipeline
from blink.gateway.safety.stream_guard import CONTENT_FILTER, GuardedBackend
from blink.gateway.safety.texts import finish_reasons, input_text, output_texts
from blink.gateway.safety.verdict import Verdict
from blink.gateway.safety.webhook import Webhook
from blink.obs.redact import redact

log = logging.getLogger("blink.safety")


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
                 webhook: Webhook | None = None) -> None:  # fmt: skip
        self.pipeline = pipeline
        self.mode = mode
        self.routes = dict(routes or {})
        self.webhook = webhook
        self.counters = SafetyCounters()
        self._pending: set[asyncio.Task[None]] = set()

    def mode_for(self, model: str) -> str:
        return self.routes.get(model, self.mode)

    def guard(self, backend: Backend, model: str) -> Backend:
        if self.mode_for(model) != "blocking":
            return backend
        return GuardedBackend(backend, self.pipeline, self._on_block)

    def _on_block(self, categories: set[str]) -> None:
        self.counters.blocked += 1
        self.counters.count(categories)

    def after_response(self, req: GenerationRequest, model: str, rendered: dict[str, Any],
                       on_clean: Callable[[], None] | None) -> None:  # fmt: skip
        """Called once the response's last byte was sent; only schedules work."""
        if self.mode_for(model) == "off":
            if on_clean is not None:
                on_clean()
            return
        if CONTENT_FILTER in finish_reasons(rendered):
            return  # blocked in line (counted there): never cached
        task = asyncio.get_running_loop().create_task(self._check(req, model, rendered, on_clean))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def _check(self, req: GenerationRequest, model: str, rendered: dict[str, Any],
                     on_clean: Callable[[], None] | None) -> None:  # fmt: skip
        try:
            prompt = input_text(req)
            answers = output_texts(rendered)
            verdicts = [await self.pipeline.check(t) for t in [prompt, *answers]]
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
                await self.webhook.post(_report(req, model, verdict, prompt, answers))
            return
        if on_clean is not None and not any(v.redacted is not None for v in verdicts[1:]):
            on_clean()  # clean and no PII in the answer: the cache may keep it

    async def drain(self) -> None:
        while self._pending:
            await asyncio.gather(*list(self._pending), return_exceptions=True)

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
