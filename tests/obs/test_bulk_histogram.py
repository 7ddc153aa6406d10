"""The bulk ITL histogram exposes exactly what prometheus-client's Histogram would."""

from __future__ import annotations

import random

import pytest
from prometheus_client import CollectorRegistry, Histogram, generate_latest

from blink.obs.bulk_histogram import BulkHistogram
from blink.obs.metrics import ITL_BUCKETS


def test_same_exposition_as_prometheus_client() -> None:
    rng = random.Random(0)
    # Values on bucket bounds, between them and past the last one.
    values = [rng.choice([0.001, 0.02, 0.0255, 5.0, 7.0, rng.random()]) for _ in range(2000)]
    reference = CollectorRegistry()
    hist = Histogram("itl_seconds", "doc", ["model"], buckets=ITL_BUCKETS, registry=reference)
    bulk_registry = CollectorRegistry()
    bulk = BulkHistogram("itl_seconds", "doc", ["model"], ITL_BUCKETS)
    bulk_registry.register(bulk)
    for i, model in enumerate(("a", "b")):
        part = values[i::2]
        for v in part:
            hist.labels(model).observe(v)
        bulk.observe_many((model,), part[:700])
        bulk.observe_many((model,), part[700:])
    expected = [line for line in generate_latest(reference).decode().splitlines() if "_created" not in line]
    got = generate_latest(bulk_registry).decode().splitlines()

    def split(lines: list[str]) -> tuple[list[str], list[float]]:
        # Sums are compared as floats: adding in batches rounds differently in the last digits.
        return [x for x in lines if "_sum" not in x], [float(x.split()[-1]) for x in lines if "_sum" in x]

    assert split(got)[0] == split(expected)[0]
    assert split(got)[1] == pytest.approx(split(expected)[1], rel=1e-12)
