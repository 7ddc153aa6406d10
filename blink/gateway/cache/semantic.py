"""The semantic matcher: an embedder on its own thread plus the hit guard.

Embedding (milliseconds of ONNX Runtime) runs on one dedicated worker thread so it never blocks
the event loop; ONNX Runtime releases the GIL while it computes, so other streams keep flowing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

import numpy as np

from blink.config.gateway import SemanticCacheSettings
from blink.gateway.cache import lexicon, synonyms
from blink.gateway.cache.guard import same_answer


class Embedder(Protocol):
    dim: int

    def embed(self, text: str) -> np.ndarray: ...


class GuardedMatcher:
    def __init__(
        self, embedder: Embedder, threshold: float, guard: bool = True,
        embed_async: Callable[[str], Awaitable[np.ndarray]] | None = None,
    ) -> None:  # fmt: skip
        self.embedder = embedder
        self.threshold = threshold
        self.guard = guard
        # The model server's batched encoder (shared with routing and /v1/embeddings), when wired.
        self._embed_async = embed_async
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="blink-embed")
        if guard and not synonyms.available():  # at start-up, not as a 500 on the first hit
            raise synonyms.WordNetMissing(synonyms.WordNetMissing.__doc__)
        if guard:  # off the event loop, before the first hit needs it
            self._worker.submit(lexicon.warm)
            self._worker.submit(synonyms.warm)

    @classmethod
    def from_settings(cls, s: SemanticCacheSettings) -> GuardedMatcher:
        from blink.modelserver.embedder import OnnxEmbedder

        return cls(OnnxEmbedder(s.model, s.onnx_dir, s.quantize), s.threshold, s.guard)

    async def embed(self, text: str) -> np.ndarray:
        if self._embed_async is not None:
            return await self._embed_async(text)
        return await asyncio.get_running_loop().run_in_executor(self._worker, self.embedder.embed, text)

    def accept(self, query: str, cached_query: str, score: float) -> bool:
        if score < self.threshold:
            return False
        return not self.guard or same_answer(query, cached_query, score)
