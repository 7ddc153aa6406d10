"""All configured checks over one text, merged into one verdict."""

from __future__ import annotations

from collections.abc import Sequence

from blink.gateway.safety.checks import Check
from blink.gateway.safety.verdict import Verdict


class SafetyPipeline:
    def __init__(self, checks: Sequence[Check]) -> None:
        self.checks = list(checks)
        # Every covered category and its threshold (the strictest where two checks share one).
        self.thresholds: dict[str, float] = {}
        for c in self.checks:
            for category, t in c.thresholds.items():
                self.thresholds[category] = min(t, self.thresholds.get(category, t))

    async def check(self, text: str) -> Verdict:
        if not text:
            return Verdict()
        # In turn, not gathered: the built-in checks never suspend, and a task per check would
        # cost more CPU than the checks themselves.
        verdict = Verdict()
        for c in self.checks:
            verdict.merge(await c.check(text))
        return verdict
