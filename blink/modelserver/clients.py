"""Adapters that hand one served encoder to its callers in the shape each expects.

The semantic cache wants ``.dim``, ``embed(text)`` and an async embed; the router's classifier a
``Callable[[list[str]], np.ndarray]`` it calls from worker threads. Both go through the same
batcher, so concurrent requests share one model call.
"""

from __future__ import annotations

import numpy as np

from blink.modelserver.server import ServedModel


class EncoderClient:
    def __init__(self, model: ServedModel) -> None:
        self.model = model
        self.dim = model.dim

    def embed(self, text: str) -> np.ndarray:
        return self.model.run_sync([text])[0]

    async def aembed(self, text: str) -> np.ndarray:
        return (await self.model.run([text]))[0]

    def __call__(self, texts: list[str]) -> np.ndarray:
        return self.model.run_sync(texts)
