"""Engine gauges read at scrape time from each backend's ``load()``: nothing is pushed.

A scrape every few seconds costs one ``load()`` call per backend; pushing on every engine
step would cost the engine's hot loop instead. A field a backend does not report (``None``, or
absent from its ``Load``) produces no sample rather than a misleading zero.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

# () -> [(model name, Load)]: what the collector reads; the gateway passes its registry's backends.
LoadSource = Callable[[], Iterable[tuple[str, Any]]]

# (series, help, Load attribute)
ENGINE_GAUGES = (
    ("vllm:num_requests_running", "Requests running in the engine.", "running"),
    ("vllm:num_requests_waiting", "Requests waiting in the engine queue.", "waiting"),
    ("vllm:kv_cache_usage_perc", "KV-cache usage, 0-1.", "kv_usage"),
    ("blink_prefix_cache_hit_rate", "Prefix-cache hit rate, 0-1.", "prefix_cache_hit_rate"),
    ("blink_spec_decode_acceptance_rate", "Speculative-decoding draft acceptance rate, 0-1.", "spec_acceptance_rate"),
    ("blink_spec_decode_tokens_per_step", "Tokens emitted per speculative verification step.", "spec_tokens_per_step"),
    ("blink_engine_batch_size", "Sequences in the last engine step.", "batch_size"),
)
# Per priority class (label ``priority``): (series, help, Load attribute, is a counter).
CLASS_SERIES = (
    ("blink_engine_queue_depth", "Requests waiting in the engine, by priority class.", "waiting_by_class", False),
    ("blink_engine_running", "Requests running in the engine, by priority class.", "running_by_class", False),
    ("blink_engine_admitted", "Requests the engine admitted, by priority class.", "admitted_by_class", True),
    ("blink_engine_queue_wait_seconds", "Summed engine queue wait (arrival to first step), by priority class.",
     "queue_wait_s_by_class", True),
)


class EngineCollector(Collector):
    def __init__(self, loads: LoadSource) -> None:
        self._loads = loads

    def describe(self) -> list[GaugeMetricFamily]:
        # Described without reading backends, so registering never calls load().
        return [GaugeMetricFamily(name, doc, labels=["model_name"]) for name, doc, _ in ENGINE_GAUGES] + [
            _class_family(name, doc, counter) for name, doc, _, counter in CLASS_SERIES
        ]

    def collect(self) -> Iterator[GaugeMetricFamily]:
        families = {attr: GaugeMetricFamily(name, doc, labels=["model_name"]) for name, doc, attr in ENGINE_GAUGES}
        loads = list(self._loads())
        for model, load in loads:
            for attr, family in families.items():
                value = getattr(load, attr, None)
                if value is not None:
                    family.add_metric([model], float(value))
        yield from families.values()
        for name, doc, attr, counter in CLASS_SERIES:
            fam = _class_family(name, doc, counter)
            for model, load in loads:
                for cls, value in (getattr(load, attr, None) or {}).items():
                    fam.add_metric([model, cls], float(value))
            yield fam


def _class_family(name: str, doc: str, counter: bool) -> GaugeMetricFamily | CounterMetricFamily:
    if counter:
        return CounterMetricFamily(name, doc, labels=["model_name", "priority"])
    return GaugeMetricFamily(name, doc, labels=["model_name", "priority"])
