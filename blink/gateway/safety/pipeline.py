"""All configured checks over one text, merged into one verdict."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from blink.gateway.safety.checks import Check
from blink.gateway.safety.verdict import Verdict


class SafetyPipeline:
    def __init__(self, checks: Sequence[Check]) -> None:
        self.checks = list(checks)

    async def check(self, text: str) -> Verdict:
        if not text:
            return Verdict()
        if len(self.checks) == 1:
            return await self.checks[0].check(text)
        verdict = Verdict()
        for v in await asyncio.gather(*(c.check(text) for c in self.checks)):
            verdict.merge(v)
        return verdict
