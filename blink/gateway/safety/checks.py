"""The check interface and the fast built-in checks (rules, PII).

A check is anything with ``name``, ``thresholds`` and ``async check(text) -> Verdict``: the
built-in rules are pure CPU in microseconds, the classifier check awaits the model server's batcher.
``thresholds`` names every category the check covers and the score at which it is true, so a
report (``/v1/moderations``) lists what was checked and nothing else.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Literal, Protocol

from blink.gateway.safety.verdict import Verdict
from blink.obs.redact import PII_KINDS, find_pii, redact

# Phrases that mark an attempt to override the system prompt (common jailbreak openers).
INJECTION_MARKERS = (
    r"ignore (?:all |any )?(?:the |your )?(?:previous|prior|above) (?:instructions|prompts?|rules)",
    r"disregard (?:all |any )?(?:the |your )?(?:previous|prior|above|system) (?:instructions|prompts?)",
    r"you are now (?:in )?(?:DAN|developer mode|jailbroken)",
    r"(?:reveal|print|show|repeat) (?:me )?(?:your|the) (?:system|hidden) prompt",
    r"</?(?:system|im_start|im_end)>|<\|im_start\|>",
)


class Check(Protocol):
    name: str
    # Category -> the score at or above which it is true (rules and PII score 1.0 when they fire).
    thresholds: Mapping[str, float]

    async def check(self, text: str) -> Verdict: ...


class RuleCheck:
    """Blocklisted phrases (whole words, case-insensitive), operator regexes, injection markers."""

    name = "rules"

    def __init__(self, blocklist: Sequence[str] = (), patterns: Sequence[str] = (), prompt_injection: bool = True) -> None:
        words = [r"\b" + re.escape(w) + r"\b" for w in blocklist if w.strip()]
        self._rules: list[tuple[str, re.Pattern[str]]] = []
        if words or patterns:
            self._rules.append(("blocklist", re.compile("|".join([*words, *patterns]), re.IGNORECASE)))
        if prompt_injection:
            self._rules.append(("prompt_injection", re.compile("|".join(INJECTION_MARKERS), re.IGNORECASE)))
        self.thresholds = {category: 1.0 for category, _ in self._rules}

    async def check(self, text: str) -> Verdict:
        return self.check_now(text)

    def check_now(self, text: str) -> Verdict:
        v = Verdict()
        for category, pattern in self._rules:
            if pattern.search(text):
                v.flagged = True
                v.categories.add(category)
                v.scores[category] = 1.0
        return v


class PiiCheck:
    """``redact``: report PII and give the redacted text; ``flag``: also flag the text."""

    name = "pii"

    def __init__(self, action: Literal["redact", "flag"] = "redact") -> None:
        self.action = action
        self.thresholds = {f"pii/{kind}": 1.0 for kind in PII_KINDS}

    async def check(self, text: str) -> Verdict:
        found = find_pii(text)
        if not found:
            return Verdict()
        kinds = {f"pii/{m.kind}" for m in found}
        flag = self.action == "flag"
        return Verdict(flagged=flag, scores=dict.fromkeys(kinds, 1.0), categories=kinds if flag else set(),
                       redacted=redact(text))  # fmt: skip
