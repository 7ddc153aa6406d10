"""Offensive language with ``alt-profanity-check`` (MIT; its TF-IDF + linear SVM ships in the wheel).

The one classifier found on the package registries that works offline: toxicity models such as
Detoxify download their weights at run time. It scores one category, ``profanity`` (insults,
slurs, swearing), not OpenAI's hate/violence/self-harm taxonomy, so only that category is
reported. Its calibrated SVM costs milliseconds of CPU per text, so it runs in a worker thread,
never on the event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from blink.gateway.safety.verdict import Verdict

CATEGORY = "profanity"


def profanity_available() -> bool:
    """Whether the ``moderation`` extra is installed (``safety.profanity: auto`` uses it then)."""
    from importlib.util import find_spec

    return find_spec("profanity_check") is not None


class ProfanityCheck:
    name = "profanity"

    def __init__(self, threshold: float) -> None:
        from profanity_check import predict_prob  # loads the vectorizer and model once

        self._predict: Callable[[Sequence[str]], Sequence[float]] = predict_prob
        self.threshold = threshold
        self.thresholds = {CATEGORY: threshold}

    async def check(self, text: str) -> Verdict:
        p = float((await asyncio.to_thread(self._predict, [text]))[0])
        hit = p >= self.threshold
        return Verdict(flagged=hit, scores={CATEGORY: p}, categories={CATEGORY} if hit else set())
