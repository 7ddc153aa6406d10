"""The registry of named models, each behind its own dynamic batcher (queue, window, timeout, stats).

Two kinds, each a ``Protocol`` so any runner fits: encoders (texts -> unit-norm rows) and
sequence classifiers (texts -> label probabilities). Built once by the composition root and
shared by the semantic cache, the router's classifier, the safety filter and the endpoints.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from blink.modelserver.batcher import BatchConfig, DynamicBatcher
from blink.protocol.errors import ModelNotFoundError


class TokenCounter(Protocol):
    max_tokens: int

    def count(self, texts: list[str]) -> list[int]: ...


class EncoderRunner(Protocol):
    dim: int

    @property
    def tokenizer(self) -> TokenCounter: ...

    def __call__(self, texts: list[str]) -> np.ndarray: ...


class ClassifierRunner(Protocol):
    labels: list[str]

    @property
    def tokenizer(self) -> TokenCounter: ...

    def __call__(self, texts: list[str]) -> np.ndarray: ...


@dataclass(slots=True)
class ServedModel:
    name: str
    kind: str  # encoder | classifier
    batcher: DynamicBatcher[str, np.ndarray]
    tokenizer: TokenCounter
    dim: int = 0
    labels: tuple[str, ...] = ()

    async def run(self, texts: list[str]) -> np.ndarray:
        return np.stack(await self.batcher.run(texts))

    def run_sync(self, texts: list[str]) -> np.ndarray:
        return np.stack(self.batcher.run_sync(texts))


def _rows(fn: Callable[[list[str]], np.ndarray]) -> Callable[[list[str]], list[np.ndarray]]:
    return lambda texts: list(fn(texts))


class ModelServer:
    def __init__(self) -> None:
        self._models: dict[str, ServedModel] = {}

    def add_encoder(self, name: str, runner: EncoderRunner, config: BatchConfig) -> ServedModel:
        model = ServedModel(name, "encoder", DynamicBatcher(name, _rows(runner), config), runner.tokenizer, dim=runner.dim)
        self._models[name] = model
        return model

    def add_classifier(self, name: str, runner: ClassifierRunner, config: BatchConfig) -> ServedModel:
        batcher: DynamicBatcher[str, np.ndarray] = DynamicBatcher(name, _rows(runner), config)
        model = ServedModel(name, "classifier", batcher, runner.tokenizer, labels=tuple(runner.labels))
        self._models[name] = model
        return model

    def get(self, name: str, kind: str) -> ServedModel:
        model = self._models.get(name)
        if model is None or model.kind != kind:
            names = [m.name for m in self._models.values() if m.kind == kind]
            raise ModelNotFoundError(f"The {kind} '{name}' does not exist; served: {names}.", param="model")
        return model

    def default(self, kind: str) -> ServedModel | None:
        return next((m for m in self._models.values() if m.kind == kind), None)

    def models(self) -> list[ServedModel]:
        return list(self._models.values())

    def close(self) -> None:
        for model in self._models.values():
            model.batcher.close()
