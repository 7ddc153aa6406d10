"""Embedding classifier: nearest centroid over example prompts per label -> tier.

The embedder is any ``Callable[[list[str]], np.ndarray]`` (rows = texts), so routing can share
the semantic cache's embedder (and model) rather than load a second one. Examples are embedded
once at start-up; a request costs one embedding plus a (labels x dim) dot product.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from blink.backends.base import GenerationRequest
from blink.gateway.router.policy import Route, TierView, last_user_text

Embedder = Callable[[list[str]], np.ndarray]

# Only the latest user turn is judged, cut to this many characters (~512 tokens, MiniLM's limit).
_MAX_CHARS = 2048


def _normalise(rows: np.ndarray) -> np.ndarray:
    rows = np.asarray(rows, dtype=np.float32)
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    return rows / np.maximum(norms, 1e-12)


class CentroidClassifier:
    """Labels from examples: each label's centroid is the normalised mean of its examples."""

    def __init__(self, embed: Embedder, examples: Mapping[str, Sequence[str]]) -> None:
        if not examples or any(not texts for texts in examples.values()):
            raise ValueError("every label needs at least one example")
        self._embed = embed
        self.labels = list(examples)
        centroids = [_normalise(embed(list(examples[label]))).mean(axis=0) for label in self.labels]
        self._centroids = _normalise(np.stack(centroids))
        self.dim = int(self._centroids.shape[1])

    def scores(self, texts: list[str]) -> np.ndarray:
        """Cosine similarity of each text to each label's centroid: (len(texts), len(labels))."""
        return _normalise(self._embed([t[:_MAX_CHARS] for t in texts])) @ self._centroids.T

    def classify(self, text: str) -> tuple[str, float]:
        """The best label and its margin over the runner-up (0..2: how sure)."""
        return self.classify_vector(self.scores([text])[0], normalised=True)

    def classify_vector(self, vec: np.ndarray, normalised: bool = False) -> tuple[str, float]:
        """Like ``classify`` for a vector already embedded (by the semantic cache): one dot product."""
        row = vec if normalised else _normalise(np.asarray(vec).reshape(1, -1))[0] @ self._centroids.T
        order = np.argsort(row)[::-1]
        margin = float(row[order[0]] - row[order[1]]) if len(order) > 1 else 1.0
        return self.labels[int(order[0])], margin


class ClassifierPolicy:
    name = "classifier"

    def __init__(
        self, classifier: CentroidClassifier, label_tiers: Mapping[str, str], min_margin: float = 0.0, offload: bool = True
    ) -> None:
        self.classifier = classifier
        self.label_tiers = dict(label_tiers)
        # Below this margin the classifier abstains and the next policy decides.
        self.min_margin = min_margin
        # Embedding is milliseconds of CPU work: run it off the event loop by default.
        self.offload = offload

    async def choose(self, req: GenerationRequest, tiers: Sequence[TierView]) -> Route | None:
        shared = req.embedding
        if shared is not None and np.asarray(shared).size == self.classifier.dim:
            label, margin = self.classifier.classify_vector(shared)  # the cache's embedding: no model call
            return self._route(label, margin, tiers)
        text = last_user_text(req)
        if not text:
            return None
        if self.offload:
            label, margin = await asyncio.to_thread(self.classifier.classify, text)
        else:
            label, margin = self.classifier.classify(text)
        return self._route(label, margin, tiers)

    def _route(self, label: str, margin: float, tiers: Sequence[TierView]) -> Route | None:
        tier = self.label_tiers.get(label)
        if tier is None or margin < self.min_margin or tier not in {t.name for t in tiers}:
            return None
        return Route(tier, self.name, f"{label} (margin {margin:.2f})")
