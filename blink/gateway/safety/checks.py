"""The safety checks: what one says (``Verdict``), what it reads (the request's and the answer's
texts), the built-in rules and PII checks, the model server's classifier, profanity, and
``SafetyPipeline`` that runs them all over one text.

A check is anything with ``name``, ``thresholds`` and ``async check(text) -> Verdict``: the
built-in rules are pure CPU in microseconds, the classifier check awaits the model server's batcher.
``thresholds`` names every category the check covers and the score at which it is true, so a
report (``/v1/moderations``) lists what was checked and nothing else.

Profanity uses ``alt-profanity-check`` (MIT; its TF-IDF + linear SVM ships in the wheel), the
one classifier found on the package registries that works offline: toxicity models such as
Detoxify download their weights at run time. It scores one category, ``profanity`` (insults,
slurs, swearing), not OpenAI's hate/violence/self-harm taxonomy, so only that category is
reported. Its calibrated SVM costs milliseconds of CPU per text, so it runs in a worker thread,
never on the event loop."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from blink.backends.base import GenerationRequest
from blink.modelserver.server import ServedModel
from blink.obs.redact import PII_KINDS, find_pii, redact


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


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # multi-part content: only the text parts
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type") == "text")
    return ""


def input_text(req: GenerationRequest) -> str:
    """User and system turns of a chat, or a completion's prompt (token-id prompts have no text)."""
    if req.messages is not None:
        return "\n".join(_content_text(m.get("content")) for m in req.messages if m.get("role") in ("user", "system"))
    prompts = req.prompts if req.prompts is not None else [req.prompt]
    return "\n".join(p for p in prompts if isinstance(p, str))


def output_texts(rendered: dict[str, Any]) -> list[str]:
    out = []
    for c in rendered.get("choices", []):
        out.append(str((c.get("message") or {}).get("content") or "") if "message" in c else str(c.get("text") or ""))
    return out


def finish_reasons(rendered: dict[str, Any]) -> list[str | None]:
    return [c.get("finish_reason") for c in rendered.get("choices", [])]


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
