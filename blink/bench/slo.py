"""``--slo ttft=100ms,itl=50ms,e2e=2s``: per-request latency targets for goodput."""

from __future__ import annotations

import re

METRICS = ("ttft", "itl", "tpot", "e2e")
_UNITS = {"ms": 1e-3, "s": 1.0, "us": 1e-6}
_ITEM = re.compile(r"^\s*(\w+)\s*[=:]\s*(\d+(?:\.\d+)?)\s*(ms|s|us)?\s*$")


def parse_slo(text: str | None) -> dict[str, float]:
    """Metric -> seconds. A bare number is milliseconds (how latency SLOs are usually written)."""
    if not text:
        return {}
    slo: dict[str, float] = {}
    for item in text.split(","):
        match = _ITEM.match(item)
        if match is None or match.group(1).lower() not in METRICS:
            raise ValueError(f"bad SLO item {item!r}: expected e.g. ttft=100ms (one of {', '.join(METRICS)})")
        slo[match.group(1).lower()] = float(match.group(2)) * _UNITS[match.group(3) or "ms"]
    return slo
