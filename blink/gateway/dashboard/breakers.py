"""Breaker states for the dashboard, read from the ``blink_breaker_state`` gauge on the app's registry.

Reading the exported series (rather than the router's objects) keeps the dashboard independent
of how routing is built: whatever exports the gauge shows up.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry

# The gauge's encoding (blink/gateway/router/metrics.py): 0 closed, 1 half-open, 2 open.
_STATES = {0: "closed", 1: "half_open", 2: "open"}
SERIES = "blink_breaker_state"


def breaker_states(registry: CollectorRegistry) -> dict[str, str]:
    out: dict[str, str] = {}
    for family in registry.restricted_registry([SERIES]).collect():
        for s in family.samples:
            if s.name == SERIES:
                name = "/".join(s.labels[k] for k in ("route", "tier", "replica") if k in s.labels)
                out[name] = _STATES.get(int(s.value), str(s.value))
    return out
