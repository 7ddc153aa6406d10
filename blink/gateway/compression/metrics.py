"""Prompt compression on /metrics, read from each compressing tier's counters at scrape time."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

OUTCOMES = ("compressed", "unchanged", "failed")


@dataclass(slots=True)
class CompressionStats:
    """Per tier: requests by outcome, and the tokens before and after (the scorer's count)."""

    compressed: int = 0
    unchanged: int = 0
    failed: int = 0
    tokens_in: int = 0
    tokens_removed: int = 0


class CompressionCollector(Collector):
    def __init__(self, tiers: Sequence[tuple[str, CompressionStats]]) -> None:
        self._tiers = list(tiers)

    def collect(self) -> Iterator[CounterMetricFamily]:
        requests = CounterMetricFamily("blink_compression_requests", "Chat requests to a compressing tier, by "
                                       "outcome (unchanged: nothing long enough, or nothing to drop).",
                                       labels=["model", "outcome"])
        scored = CounterMetricFamily("blink_compression_scored_tokens", "Tokens of compressible context scored "
                                     "(the scorer's count).", labels=["model"])
        removed = CounterMetricFamily("blink_compression_removed_tokens", "Tokens of context dropped before the "
                                      "upstream call (the scorer's count); removed / scored is the ratio achieved.",
                                      labels=["model"])
        for model, stats in self._tiers:
            for outcome in OUTCOMES:
                requests.add_metric([model, outcome], getattr(stats, outcome))
            scored.add_metric([model], stats.tokens_in)
            removed.add_metric([model], stats.tokens_removed)
        yield requests
        yield scored
        yield removed
