"""What a check says about one text: flagged or not, by category, with scores."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class Verdict:
    flagged: bool = False
    # category -> score in 0..1 (rules and PII score 1.0 when they fire).
    scores: dict[str, float] = field(default_factory=dict)
    # categories that flagged the text
    categories: set[str] = field(default_factory=set)
    # The text with PII redacted, when a PII check ran and found some.
    redacted: str | None = None

    def merge(self, other: Verdict) -> Verdict:
        self.flagged = self.flagged or other.flagged
        for k, v in other.scores.items():
            self.scores[k] = max(v, self.scores.get(k, 0.0))
        self.categories |= other.categories
        self.redacted = other.redacted if other.redacted is not None else self.redacted
        return self
