"""Stream middleware: compress a chat's long context, then call the tier it wraps.

Scoring costs one prefill of the compressible text on the embedded model, so it runs only where
it pays: chat requests, spans of at least ``min_chars``. Any failure to score (the scorer busy,
down, or its tokens not spelling the text) sends the request as it came: compression saves
money, it never costs an answer.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

from blink.backends.base import Backend, Delta, GenerationRequest, StreamFn
from blink.config.compression import CompressionSettings
from blink.gateway.compression.metrics import CompressionStats
from blink.gateway.compression.scorer import SelfInformationScorer
from blink.gateway.compression.selection import select_words
from blink.gateway.compression.spans import Segment, compressible_messages, split_code
from blink.obs import annotate

log = logging.getLogger("blink.gateway")


class Compressor:
    """Stream middleware (``StreamMiddleware``): one per model configured with ``compression``;
    serve.py registers the model as a ``LayeredServer`` so every caller gets it."""

    def __init__(self, settings: CompressionSettings, resolve: Callable[[str], Backend]) -> None:
        self.settings = settings
        self.scorer = SelfInformationScorer(resolve, settings.scorer)
        self.stats = CompressionStats()

    def __call__(self, inner: StreamFn) -> StreamFn:
        async def stream(req: GenerationRequest) -> AsyncIterator[Delta]:
            sent = req
            if req.kind == "chat" and req.messages:
                try:
                    sent = await self._compress(req)
                except Exception:  # a saving, never a failure: send the request as it came
                    self.stats.failed += 1
                    log.warning("prompt compression skipped for %s", req.request_id, exc_info=True)
            async for delta in inner(sent):
                yield delta

        return stream

    async def _compress(self, req: GenerationRequest) -> GenerationRequest:
        """The request to send: a copy with the shortened messages, or ``req`` itself. ``req`` keeps
        the client's messages (what the cache and precompute recipes record) and counts the tokens
        removed (what the response header and cost accounting report)."""
        messages = [dict(m) for m in req.messages or []]
        # (message index, part index or None, segments) of every text that may shrink.
        texts: list[tuple[int, int | None, list[Segment]]] = []
        for i in compressible_messages(messages):
            content = messages[i].get("content")
            if isinstance(content, str):
                texts.append((i, None, split_code(content)))
            elif isinstance(content, list):
                for j, part in enumerate(content):
                    if isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str):
                        texts.append((i, j, split_code(part["text"])))
        jobs = [seg for _, _, segs in texts for seg in segs
                if seg.compressible and len(seg.text) >= self.settings.min_chars]
        if not jobs:
            self.stats.unchanged += 1
            return req
        question = _last_user_text(messages) if self.settings.condition_on_question else None
        results = await asyncio.gather(*(self._shrink(seg, question) for seg in jobs))
        dropped = 0
        for seg, (scored, result) in zip(jobs, results, strict=True):
            self.stats.tokens_in += scored
            if result is not None:
                seg.text, n = result
                dropped += n
        if dropped == 0:
            self.stats.unchanged += 1
            return req
        self.stats.compressed += 1
        self.stats.tokens_removed += dropped
        for i, j, segs in texts:
            text = "".join(s.text for s in segs)
            if j is None:
                messages[i]["content"] = text
            else:
                parts: list[Any] = [dict(p) if isinstance(p, dict) else p for p in messages[i]["content"]]
                parts[j]["text"] = text
                messages[i]["content"] = parts
        req.compressed_tokens += dropped
        annotate(compressed_tokens=str(dropped))
        return dataclasses.replace(req, messages=messages)

    async def _shrink(self, seg: Segment, question: str | None) -> tuple[int, tuple[str, int] | None]:
        """(tokens scored, the shortened text and tokens dropped, or None to keep it)."""
        tokens = await self.scorer.score(seg.text, question)
        return len(tokens), select_words(seg.text, tokens, 1.0 / self.settings.ratio)


def _last_user_text(messages: list[dict[str, Any]]) -> str | None:
    """The last user turn's text (never compressed itself): what the context is scored against."""
    for m in reversed(messages):
        if m.get("role") != "user":
            continue
        content = m.get("content")
        if isinstance(content, str):
            return content
        if isinstance(content, list):
            texts = [p["text"] for p in content if isinstance(p, dict) and p.get("type") == "text"
                     and isinstance(p.get("text"), str)]
            return "\n".join(texts) or None
        return None
    return None
