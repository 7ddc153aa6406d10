"""A sequence classifier from the model server as a safety check (batched with concurrent checks)."""

from __future__ import annotations

from collections.abc import Collection

from blink.gateway.safety.verdict import Verdict
from blink.modelserver.server import ServedModel


class ClassifierCheck:
    name = "classifier"

    def __init__(self, model: ServedModel, safe_labels: Collection[str], threshold: float) -> None:
        self.model = model
        self.safe_labels = set(safe_labels)
        # A label other than a safe one at or above this probability flags the text.
        self.threshold = threshold
        self.thresholds = {label: threshold for label in model.labels if label not in self.safe_labels}

    async def check(self, text: str) -> Verdict:
        probs = (await self.model.run([text]))[0]
        v = Verdict()
        for label, p in zip(self.model.labels, probs.tolist(), strict=True):
            if label in self.safe_labels:
                continue
            v.scores[label] = float(p)
            if p >= self.threshold:
                v.flagged = True
                v.categories.add(label)
        return v
