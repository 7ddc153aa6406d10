"""The stage API other layers call: time a stage, add an annotation, count an event.

The current request's ``RequestTrace`` travels in a ``ContextVar`` (set by the route handler,
inherited by everything the request awaits), so auth, limits, cache and router code records
its time without being handed an observability object. Outside a request every call is a
no-op, so library code can call these unconditionally.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar, Token

from blink.obs.trace import RequestTrace

# Request-scoped, not process state: each request task sees its own value.
_current: ContextVar[RequestTrace | None] = ContextVar("blink_request_trace", default=None)

# Events a layer may count, with the labels each takes; one Prometheus counter each (see
# ``GatewayMetrics``): router decisions, tier escalations, hedged requests, circuit-breaker
# transitions and load sheds.
EVENT_LABELS: dict[str, tuple[str, ...]] = {
    "router_decision": ("route", "backend"),
    "escalation": ("source", "target"),
    "hedge": ("outcome",),
    "breaker_transition": ("backend", "state"),
    "shed": ("reason",),
}


def current_trace() -> RequestTrace | None:
    return _current.get()


def bind(trace: RequestTrace | None) -> Token[RequestTrace | None]:
    return _current.set(trace)


def unbind(token: Token[RequestTrace | None]) -> None:
    _current.reset(token)


@contextmanager
def stage(name: str) -> Iterator[None]:
    """Time the enclosed block as stage ``name`` of the current request (``auth``, ``cache``...)."""
    trace = _current.get()
    if trace is None:
        yield
        return
    t0 = time.perf_counter()
    try:
        yield
    finally:
        trace.add_stage(name, t0, time.perf_counter() - t0)


def record_stage(name: str, seconds: float, start: float | None = None) -> None:
    """Record a stage timed elsewhere; ``start`` is its ``perf_counter()`` start (default: now - seconds)."""
    trace = _current.get()
    if trace is not None:
        trace.add_stage(name, time.perf_counter() - seconds if start is None else start, seconds)


def lap(name: str) -> None:
    """Record stage ``name`` as the time since the previous stage ended (or the request began).

    One line per stage in straight-line code: ``parse(...); lap("parse"); resolve(...); lap("resolve")``.
    """
    trace = _current.get()
    if trace is None:
        return
    now = time.perf_counter()
    last = trace.stages[-1] if trace.stages else None
    start = last.start + last.seconds if last is not None else trace.start
    trace.add_stage(name, start, now - start)


def annotate(*, cache: str | None = None, key_id: str | None = None, backend: str | None = None,
             model: str | None = None, tier: str | None = None, **attributes: str) -> None:
    """Attach request facts: cache outcome (exact|semantic|miss), API key id (never the key), backend, model."""
    trace = _current.get()
    if trace is None:
        return
    if model is not None:
        trace.model = model
    if tier is not None:
        trace.tier = tier
    if cache is not None:
        trace.cache = cache
    if key_id is not None:
        trace.key_id = key_id
    if backend is not None:
        trace.backend = backend
    trace.attributes.update(attributes)


def count(event: str, **labels: str) -> None:
    """Count an event of the current request (``count("hedge", outcome="won")``); see ``EVENT_LABELS``."""
    check_event(event, labels)
    trace = _current.get()
    if trace is not None:
        trace.events.append((event, labels))


def check_event(event: str, labels: dict[str, str]) -> None:
    """Fail at the caller (not at export time) when an event or its labels are misspelt."""
    names = EVENT_LABELS.get(event)
    if names is None:
        raise ValueError(f"unknown event {event!r}; one of {sorted(EVENT_LABELS)}")
    if set(labels) != set(names):
        raise ValueError(f"event {event!r} takes labels {names}, got {sorted(labels)}")


def record_error(status: int, error_type: str) -> None:
    """The request failed with ``status`` (also after the headers went out, mid-stream)."""
    trace = _current.get()
    if trace is not None:
        trace.status = status
        trace.error_type = error_type
