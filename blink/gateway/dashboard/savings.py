"""Pre-computation and prompt compression for the dashboard, read from their series on the app's registry.

Like the breakers (breakers.py), the panels read the exported ``blink_precompute_*`` and
``blink_compression_*`` series rather than the services' objects, so the dashboard needs no part
of either feature; a panel is None (hidden) when its feature exports nothing, i.e. is off.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry

_PRECOMPUTE = ("blink_precompute_jobs", "blink_precompute_skipped", "blink_precompute_tokens",
               "blink_precompute_hits", "blink_precompute_budget_tokens")
_COMPRESSION = ("blink_compression_requests", "blink_compression_scored_tokens", "blink_compression_removed_tokens")


def _samples(registry: CollectorRegistry, names: tuple[str, ...]) -> list[tuple[str, dict[str, str], float]]:
    wanted = {f"{n}_total" for n in names} | set(names)
    out = []
    for family in registry.restricted_registry(list(wanted)).collect():
        for s in family.samples:
            if s.name in wanted:
                out.append((s.name.removesuffix("_total"), s.labels, s.value))
    return out


def precompute_panel(registry: CollectorRegistry) -> dict[str, Any] | None:
    """Jobs by outcome, entries written, hits they served, tokens spent idle; None when off."""
    samples = _samples(registry, _PRECOMPUTE)
    if not samples:
        return None
    jobs: dict[str, float] = {}
    written = hits = tokens = budget = 0.0
    for name, labels, value in samples:
        if name == "blink_precompute_jobs":
            jobs[labels["outcome"]] = jobs.get(labels["outcome"], 0.0) + value
            if labels["outcome"] == "done":
                written += value
        elif name == "blink_precompute_hits":
            hits += value
        elif name == "blink_precompute_tokens":
            tokens += value
        elif name == "blink_precompute_budget_tokens":
            budget = value
    return {
        "jobs": jobs,
        "entries": written,
        "hits": hits,
        # Hits served per entry pre-computed: above 1, the idle lane's tokens paid for themselves.
        "hits_per_entry": hits / written if written else None,
        "tokens_idle": tokens,
        "budget_left": budget,
    }


def compression_panel(registry: CollectorRegistry) -> dict[str, Any] | None:
    """Requests compressed, tokens scored and saved, the ratio achieved; None when no tier compresses."""
    samples = _samples(registry, _COMPRESSION)
    if not samples:
        return None
    requests: dict[str, float] = {}
    scored = removed = 0.0
    for name, labels, value in samples:
        if name == "blink_compression_requests":
            requests[labels["outcome"]] = requests.get(labels["outcome"], 0.0) + value
        elif name == "blink_compression_scored_tokens":
            scored += value
        elif name == "blink_compression_removed_tokens":
            removed += value
    kept = scored - removed
    return {
        "requests": requests,
        "tokens_scored": scored,
        "tokens_saved": removed,
        # The compression ratio as LLMLingua states it: context tokens before / after.
        "ratio": scored / kept if kept > 0 else None,
    }
