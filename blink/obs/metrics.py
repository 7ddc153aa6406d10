"""Prometheus series for the gateway: one registry per app, never the process-global one.

Names follow vLLM (``vllm:*``, label ``model_name``) wherever the meaning is the same, so
dashboards built for vLLM work on Blink unchanged; Blink-only series are ``blink_*``. Each
series, its labels and buckets are listed in ``SERIES_DOC`` (rendered into the README).
Per-request values are observed once the request finished (from its ``RequestTrace``);
engine gauges are read at scrape time by ``EngineCollector``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from blink.obs.bulk_histogram import BulkHistogram
from blink.obs.engine_collector import EngineCollector, LoadSource
from blink.obs.stages import EVENT_LABELS
from blink.obs.trace import CLIENT_CLOSED, RequestTrace

# TTFT: 1 ms (an exact-cache hit) to 60 s (a long prompt queued on a CPU); dense around the
# 50-500 ms range where interactive SLOs sit.
TTFT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.15, 0.2, 0.25, 0.3, 0.5,
                0.75, 1.0, 2.5, 5.0, 10.0, 20.0, 60.0)
# Inter-token latency / TPOT: 1 ms (a fast GPU) to 5 s (a stalled upstream); 20-100 ms is typical.
ITL_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15,
               0.2, 0.3, 0.5, 1.0, 2.5, 5.0)
# End-to-end: 10 ms (a cached answer) to 10 min (the default request timeout is 600 s).
E2E_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0,
               60.0, 120.0, 300.0, 600.0)
# Gateway stages (parse, auth, cache lookup, routing): 20 µs to 1 s; most should sit under 1 ms.
STAGE_BUCKETS = (0.00002, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                 0.1, 0.25, 0.5, 1.0)

REQUEST_LABELS = ("model_name", "backend", "route", "tier")

SERIES_DOC = """\
| series | type | labels | meaning |
|---|---|---|---|
| `vllm:time_to_first_token_seconds` | histogram | model_name, backend, route, tier | arrival to first output delta (server side) |
| `vllm:inter_token_latency_seconds` | histogram | model_name, backend, route, tier | time between consecutive output deltas |
| `vllm:request_time_per_output_token_seconds` | histogram | model_name, backend, route, tier | (last - first token) / (tokens - 1), per request |
| `vllm:e2e_request_latency_seconds` | histogram | model_name, backend, route, tier | arrival to last byte |
| `vllm:request_queue_time_seconds` | histogram | model_name, backend, route, tier | arrival to hand-off to the backend (gateway admission + stages) |
| `blink_stage_duration_seconds` | histogram | stage, model_name, route | one gateway stage (parse, resolve, auth, ratelimit, cache, router, backend_ttft, stream) |
| `blink_requests_total` | counter | model_name, backend, route, status | finished requests by HTTP status (499 = client went away) |
| `vllm:request_success_total` | counter | model_name, finished_reason | successful requests by finish reason |
| `vllm:prompt_tokens_total` / `vllm:generation_tokens_total` | counter | model_name | prompt / completion tokens |
| `blink_cache_requests_total` | counter | outcome | cache outcome: exact, semantic, miss |
| `blink_router_decisions_total` | counter | route, backend | routing decisions |
| `blink_escalations_total` | counter | source, target | cascade escalations |
| `blink_hedges_total` | counter | outcome | hedged requests |
| `blink_breaker_transitions_total` | counter | backend, state | circuit-breaker state changes |
| `blink_shed_total` | counter | reason | requests shed under load |
| `blink_client_disconnects_total` | counter | | generations aborted because the client left |
| `blink_store_errors_total` | counter | store, op | shared-store (Redis, PostgreSQL) errors and timeouts; the request went on without it |
| `blink_requests_in_flight` | gauge | | generation requests being served by this gateway |
| `vllm:num_requests_running` / `vllm:num_requests_waiting` | gauge | model_name | engine running / queued requests (read at scrape) |
| `vllm:kv_cache_usage_perc` | gauge | model_name | KV-cache blocks in use, 0-1 |
| `blink_prefix_cache_hit_rate` | gauge | model_name | prefix-cache hit rate, 0-1 |
| `blink_spec_decode_acceptance_rate` | gauge | model_name | speculative-decoding acceptance rate, 0-1 |
| `blink_spec_decode_tokens_per_step` | gauge | model_name | tokens emitted per speculative verification step |
| `blink_engine_batch_size` | gauge | model_name | sequences in the last engine step |
| `blink_engine_queue_depth` | gauge | model_name, priority | requests waiting in the engine per priority class (voice, interactive, batch, idle) |
| `blink_engine_running` | gauge | model_name, priority | requests running in the engine per priority class |
| `blink_engine_admitted_total` | counter | model_name, priority | requests the engine admitted per priority class |
| `blink_engine_queue_wait_seconds_total` | counter | model_name, priority | summed engine queue wait (arrival to first step) per priority class; divide by `blink_engine_admitted_total` for the mean |
| `blink_precompute_jobs_total` | counter | kind, outcome | idle-lane pre-computation jobs (refresh, predict) by outcome (done: an entry written; cached: already answerable; refused; failed) |
| `blink_precompute_skipped_total` | counter | kind, reason | jobs not run: budget (tokens per hour), queue_full, storage (live predicted entries) |
| `blink_precompute_tokens_total` | counter | kind | tokens spent in the idle lane by pre-computation |
| `blink_precompute_hits_total` | counter | kind | cache hits served from a pre-computed entry (divide by the cache's hits for their share) |
| `blink_precompute_budget_tokens` | gauge | | tokens the hourly pre-computation budget holds now |
"""

_EVENT_COUNTERS = {
    "router_decision": ("blink_router_decisions", "Routing decisions by route and chosen backend."),
    "escalation": ("blink_escalations", "Cascade escalations from one tier/model to another."),
    "hedge": ("blink_hedges", "Hedged (duplicated) requests by outcome."),
    "breaker_transition": ("blink_breaker_transitions", "Circuit-breaker state changes by backend."),
    "shed": ("blink_shed", "Requests shed under load, by reason."),
}


@dataclass(slots=True)
class _Children:
    """The labelled series one (model, backend, route, tier) writes to."""

    ttft: Any
    itl: tuple[str, str, str, str]  # label values for the bulk ITL histogram
    tpot: Any
    e2e: Any
    queue: Any
    requests: dict[int, Any]
    stages: dict[str, Any]
    prompt_tokens: Any
    generation_tokens: Any


class GatewayMetrics:
    """Every Prometheus series the gateway exports, on a private registry."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self, loads: LoadSource | None = None) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry

        def hist(name: str, doc: str, buckets: tuple[float, ...], labels: tuple[str, ...] = REQUEST_LABELS) -> Histogram:
            return Histogram(name, doc, labels, buckets=buckets, registry=r)

        self.ttft = hist("vllm:time_to_first_token_seconds", "Time to the first output delta.", TTFT_BUCKETS)
        self.itl = BulkHistogram("vllm:inter_token_latency_seconds", "Time between consecutive output deltas.",
                                 REQUEST_LABELS, ITL_BUCKETS)
        r.register(self.itl)
        self.tpot = hist("vllm:request_time_per_output_token_seconds", "Mean time per output token after the first.",
                         ITL_BUCKETS)
        self.e2e = hist("vllm:e2e_request_latency_seconds", "Arrival to last byte.", E2E_BUCKETS)
        self.queue = hist("vllm:request_queue_time_seconds", "Arrival to hand-off to the backend.", STAGE_BUCKETS)
        self.stage = hist("blink_stage_duration_seconds", "Time spent in one gateway stage.", STAGE_BUCKETS,
                          ("stage", "model_name", "route"))
        self.requests = Counter("blink_requests", "Finished generation requests by HTTP status.",
                                ["model_name", "backend", "route", "status"], registry=r)
        self.success = Counter("vllm:request_success", "Successful requests by finish reason.",
                               ["model_name", "finished_reason"], registry=r)
        self.prompt_tokens = Counter("vllm:prompt_tokens", "Prompt tokens processed.", ["model_name"], registry=r)
        self.generation_tokens = Counter("vllm:generation_tokens", "Completion tokens generated.", ["model_name"],
                                         registry=r)
        self.cache = Counter("blink_cache_requests", "Response-cache outcome: exact, semantic or miss.", ["outcome"],
                             registry=r)
        self.events = {
            event: Counter(name, doc, list(EVENT_LABELS[event]), registry=r)
            for event, (name, doc) in _EVENT_COUNTERS.items()
        }
        self.disconnects = Counter("blink_client_disconnects", "Generations aborted because the client went away.",
                                   registry=r)
        self.store_errors = Counter("blink_store_errors", "Shared-store errors and timeouts (skipped, never fatal).",
                                    ["store", "op"], registry=r)
        self.in_flight = Gauge("blink_requests_in_flight", "Generation requests being served.", registry=r)
        self._cache: dict[tuple[str, str, str, str], _Children] = {}
        if loads is not None:
            r.register(EngineCollector(loads))

    def _children(self, t: RequestTrace) -> _Children:
        # ``labels()`` costs a lock and a dict lookup per call; one request touches ~10 series,
        # so the children for a (model, backend, route, tier) are resolved once and kept.
        key = (t.model, t.backend, t.route, t.tier)
        c = self._cache.get(key)
        if c is None:
            c = _Children(self.ttft.labels(*key), key, self.tpot.labels(*key),
                          self.e2e.labels(*key), self.queue.labels(*key), {}, {},
                          self.prompt_tokens.labels(t.model), self.generation_tokens.labels(t.model))
            self._cache[key] = c
        return c

    def observe(self, t: RequestTrace) -> None:
        """Record one finished request."""
        if t.model and not t.backend:
            # Refused before a backend was resolved (an unknown or forbidden model): the model is
            # the client's text, and a label per distinct text grows the registry without bound.
            t = replace(t, model="")
        c = self._children(t)
        status = c.requests.get(t.status)
        if status is None:
            status = c.requests[t.status] = self.requests.labels(t.model, t.backend, t.route, str(t.status))
        status.inc()
        if t.status == CLIENT_CLOSED:
            self.disconnects.inc()
        c.e2e.observe(t.e2e)
        for s in t.stages:
            stage = c.stages.get(s.name)
            if stage is None:
                stage = c.stages[s.name] = self.stage.labels(s.name, t.model, t.route)
            stage.observe(s.seconds)
        if t.queue_time is not None:
            c.queue.observe(t.queue_time)
        if t.ttft is not None:
            c.ttft.observe(t.ttft)
        if t.itl:
            self.itl.observe_many(c.itl, t.itl)
        if t.tpot is not None:
            c.tpot.observe(t.tpot)
        if t.status == 200:
            self.success.labels(t.model, t.finish_reason or "unknown").inc()
        if t.prompt_tokens:
            c.prompt_tokens.inc(t.prompt_tokens)
        if t.completion_tokens:
            c.generation_tokens.inc(t.completion_tokens)
        if t.cache != "none":
            self.cache.labels(t.cache).inc()
        for event, event_labels in t.events:
            self.event(event, event_labels)

    def event(self, event: str, labels: dict[str, str]) -> None:
        self.events[event].labels(**labels).inc()

    def store_error(self, store: str, op: str) -> None:
        self.store_errors.labels(store, op).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
