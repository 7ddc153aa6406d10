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

from blink.backends.base import ModelCard
from blink.modelserver.batcher import BatchConfig, DynamicBatcher
from blink.protocol.errors import ModelNotFoundError


class TokenCounter(Protocol):
    max_tokens: int

    def count(self, texts: list[str]) -> list[int]: ...


class EncoderRunner(Protocol):
    dim: int

    @property
    def tokenizer(self) -> TokenCounter: ...

    def counted(self, texts: list[str]) -> tuple[np.ndarray, list[int]]:
        """One row per text and each text's full token count (one tokenisation for both)."""
        ...


class ClassifierRunner(Protocol):
    labels: list[str]

    @property
    def tokenizer(self) -> TokenCounter: ...

    def counted(self, texts: list[str]) -> tuple[np.ndarray, list[int]]: ...


# What the batcher hands back per input: the model's row and the input's full token count.
Counted = tuple[np.ndarray, int]


@dataclass(slots=True)
class ServedModel:
    name: str
    kind: str  # encoder | classifier
    batcher: DynamicBatcher[str, Counted]
    tokenizer: TokenCounter
    dim: int = 0
    labels: tuple[str, ...] = ()

    async def run(self, texts: list[str]) -> np.ndarray:
        return _stack(await self.batcher.run(texts))

    async def run_counted(self, texts: list[str]) -> tuple[np.ndarray, list[int]]:
        """Rows and full token counts (the endpoints' length check and usage)."""
        out = await self.batcher.run(texts)
        return _stack(out), [n for _, n in out]

    def run_sync(self, texts: list[str]) -> np.ndarray:
        return _stack(self.batcher.run_sync(texts))


def _stack(out: list[Counted]) -> np.ndarray:
    """Rows as one array; a single row is a view (np.stack's dispatch showed in the loop's profile)."""
    return out[0][0][None] if len(out) == 1 else np.stack([row for row, _ in out])


def _rows(fn: Callable[[list[str]], tuple[np.ndarray, list[int]]]) -> Callable[[list[str]], list[Counted]]:
    def run(texts: list[str]) -> list[Counted]:
        rows, counts = fn(texts)
        return list(zip(rows, counts, strict=True))

    return run


class ServedModels:
    """The small models (encoders, classifiers) by name; not a generation ``ModelServer``."""

    def __init__(self) -> None:
        self._models: dict[str, ServedModel] = {}

    def add_encoder(self, name: str, runner: EncoderRunner, config: BatchConfig) -> ServedModel:
        model = ServedModel(name, "encoder", DynamicBatcher(name, _rows(runner.counted), config), runner.tokenizer,
                            dim=runner.dim)  # fmt: skip
        self._models[name] = model
        return model

    def add_classifier(self, name: str, runner: ClassifierRunner, config: BatchConfig) -> ServedModel:
        batcher: DynamicBatcher[str, Counted] = DynamicBatcher(name, _rows(runner.counted), config)
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

    def cards(self) -> list[ModelCard]:
        """What /v1/models lists for these models (their input limit as ``max_model_len``)."""
        return [ModelCard(m.name, max_model_len=m.tokenizer.max_tokens) for m in self._models.values()]

    def close(self) -> None:
        for model in self._models.values():
            model.batcher.close()
