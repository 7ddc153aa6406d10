"""Rule-based routing: prompt length, keywords / regex, code, tools, images -> tier.

Rules are tried in order; a rule matches when every condition it sets holds; the first match
wins. Cheap enough (microseconds) to run before anything else.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from blink.backends.base import GenerationRequest
from blink.gateway.router.policy import Route, TierView, request_text

# Fenced blocks, or several lines that look like code (def/class/import/braces/semicolons).
_CODE_RE = re.compile(
    r"```|^\s*(def |class |import |from \S+ import |#include|function |public |fn |SELECT |for \(|if \()|[;{}]\s*$",
    re.MULTILINE,
)


@dataclass(slots=True)
class Rule:
    tier: str
    min_chars: int | None = None
    max_chars: int | None = None
    keywords: list[str] = field(default_factory=list)  # any of them, case-insensitive, whole words
    regex: str | None = None
    has_code: bool | None = None
    has_tools: bool | None = None
    has_images: bool | None = None
    _compiled: list[re.Pattern[str]] = field(default_factory=list, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.keywords:
            words = "|".join(re.escape(k) for k in self.keywords)
            self._compiled.append(re.compile(rf"\b(?:{words})\b", re.IGNORECASE))
        if self.regex:
            self._compiled.append(re.compile(self.regex, re.IGNORECASE | re.MULTILINE))

    def matches(self, req: GenerationRequest, text: str) -> bool:
        n = len(text)
        if self.min_chars is not None and n < self.min_chars:
            return False
        if self.max_chars is not None and n > self.max_chars:
            return False
        if any(p.search(text) is None for p in self._compiled):
            return False
        if self.has_code is not None and has_code(text) != self.has_code:
            return False
        if self.has_tools is not None and has_tools(req) != self.has_tools:
            return False
        return self.has_images is None or has_images(req) == self.has_images


def has_code(text: str) -> bool:
    return len(_CODE_RE.findall(text)) >= 2 or "```" in text


def has_tools(req: GenerationRequest) -> bool:
    return bool(req.extra.get("tools") or req.extra.get("functions"))


def has_images(req: GenerationRequest) -> bool:
    for message in req.messages or ():
        content = message.get("content")
        if isinstance(content, list) and any(isinstance(p, dict) and p.get("type") == "image_url" for p in content):
            return True
    return False


class RulesPolicy:
    name = "rules"

    def __init__(self, rules: Sequence[Rule]) -> None:
        self.rules = list(rules)

    async def choose(self, req: GenerationRequest, tiers: Sequence[TierView]) -> Route | None:
        if not self.rules:
            return None
        text = request_text(req)
        names = {t.name for t in tiers}
        for i, rule in enumerate(self.rules):
            if rule.tier in names and rule.matches(req, text):
                return Route(rule.tier, self.name, f"rule {i}")
        return None
