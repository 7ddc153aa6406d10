"""Observability: Prometheus metrics, OpenTelemetry traces, JSON request logs, live stats.

How a request is observed
-------------------------
``ObservabilityMiddleware`` (outermost ASGI layer) opens a ``RequestTrace`` for every
generation request and binds it to a ``ContextVar``; the response stamps each delta it writes
through ``observe_stream`` (one timestamp per delta); when the last byte is out, ``Observability``
hands the finished trace to each enabled sink: ``GatewayMetrics`` (``/metrics``), ``Tracing``
(OTLP spans, only when an endpoint is configured), ``RequestLogger`` (one JSON line) and
``LiveStats`` (the ``/dashboard``).

The stage API (for every layer on the request path)
---------------------------------------------------
Import from ``blink.obs`` and call freely; outside a request each call is a no-op::

    from blink.obs import annotate, count, lap, record_stage, stage

    with stage("auth"):              # time a block: blink_stage_duration_seconds{stage="auth"}
        key = store.check(token)      #   and a child span "blink.auth"
    record_stage("cache", seconds)   # a stage timed elsewhere
    lap("parse")                     # time since the previous stage ended (straight-line code)
    annotate(cache="exact")          # cache outcome: exact | semantic | miss
    annotate(key_id=key.id)          # the key's id for the request log (never the key itself)
    count("router_decision", route="small", backend="local")   # see EVENT_LABELS for events
    count("hedge", outcome="won"); count("escalation", source="small", target="big")
    count("shed", reason="queue_full"); count("breaker_transition", backend="b", state="open")

Outside a request (a breaker opening on a health probe) count on the app's object instead:
``app.state.obs.event("breaker_transition", backend="b", state="open")``.

Stage names in use: ``parse`` (read + validate the body), ``resolve`` (model -> backend),
``backend_ttft`` (hand-off to first delta), ``stream`` (first to last delta); the auth,
ratelimit, cache and router layers add ``auth``, ``ratelimit``, ``cache``, ``router``.
"""

from blink.obs.stages import EVENT_LABELS, annotate, count, current_trace, lap, record_stage, stage

__all__ = ["EVENT_LABELS", "annotate", "count", "current_trace", "lap", "record_stage", "stage"]
