"""``SafetySettings`` (+ the model server, for the classifier check) -> a ``SafetyStage`` or None."""

from __future__ import annotations

from blink.config.safety import SafetySettings
from blink.gateway.safety.checks import (
    Check,
    ClassifierCheck,
    PiiCheck,
    ProfanityCheck,
    RuleCheck,
    SafetyPipeline,
    profanity_available,
)
from blink.gateway.safety.stage import SafetyStage, Webhook
from blink.modelserver.server import ServedModels


def build_pipeline(s: SafetySettings, models: ServedModels | None, endpoint: bool = False) -> SafetyPipeline:
    """``endpoint``: the pipeline of /v1/moderations, where ``profanity: auto`` adds the check when it
    is installed. In the request path only ``profanity: on`` does: it costs milliseconds of CPU per
    text next to the rules' microseconds, which the TTFT path must not pay unless asked to."""
    checks: list[Check] = [RuleCheck(s.blocklist, s.patterns, s.prompt_injection)]
    if s.pii != "ignore":
        checks.append(PiiCheck(s.pii))
    if s.profanity == "on" or (endpoint and s.profanity == "auto" and profanity_available()):
        if not profanity_available():
            raise ValueError("safety.profanity: on needs alt-profanity-check: pip install 'blink-serve[moderation]'")
        checks.append(ProfanityCheck(s.threshold))
    if s.classifier is not None:
        if models is None:
            raise ValueError(f"safety.classifier {s.classifier!r} needs model_server.models to serve it")
        checks.append(ClassifierCheck(models.get(s.classifier, "classifier"), s.safe_labels, s.threshold))
    return SafetyPipeline(checks)


def build_safety(s: SafetySettings, models: ServedModels | None) -> SafetyStage | None:
    if not s.enabled:
        return None
    webhook = Webhook(s.webhook) if s.webhook else None
    return SafetyStage(build_pipeline(s, models), s.mode, s.routes, webhook)
