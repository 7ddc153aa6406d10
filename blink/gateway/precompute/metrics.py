"""Pre-computation on /metrics (``blink_precompute_*``), read from the service's counters at scrape time."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector


@dataclass(slots=True)
class PrecomputeStats:
    """Counters by job kind (``refresh`` | ``predict``)."""

    # (kind, outcome): done (an entry written) | cached (already answerable: nothing spent) |
    # refused (the key may no longer run it) | timeout | failed.
    jobs: Counter[tuple[str, str]] = field(default_factory=Counter)
    # (kind, reason) a job was not run: budget | queue_full | storage.
    skipped: Counter[tuple[str, str]] = field(default_factory=Counter)
    tokens: Counter[str] = field(default_factory=Counter)
    hits: Counter[str] = field(default_factory=Counter)
    budget_left: float = 0.0


class PrecomputeCollector(Collector):
    def __init__(self, stats: PrecomputeStats) -> None:
        self._stats = stats

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        s = self._stats
        jobs = CounterMetricFamily("blink_precompute_jobs", "Idle-lane jobs by kind and outcome (done: an entry "
                                   "refreshed or pre-generated).", labels=["kind", "outcome"])
        for (kind, outcome), n in sorted(s.jobs.items()):
            jobs.add_metric([kind, outcome], n)
        skipped = CounterMetricFamily("blink_precompute_skipped", "Jobs not run, by kind and reason (budget, "
                                      "queue_full, storage).", labels=["kind", "reason"])
        for (kind, reason), n in sorted(s.skipped.items()):
            skipped.add_metric([kind, reason], n)
        tokens = CounterMetricFamily("blink_precompute_tokens", "Tokens (prompt + completion) spent in the idle "
                                     "lane by pre-computation.", labels=["kind"])
        for kind, n in sorted(s.tokens.items()):
            tokens.add_metric([kind], n)
        hits = CounterMetricFamily("blink_precompute_hits", "Cache hits served from a pre-computed entry.",
                                   labels=["kind"])
        for kind, n in sorted(s.hits.items()):
            hits.add_metric([kind], n)
        budget = GaugeMetricFamily("blink_precompute_budget_tokens", "Tokens the hourly budget holds now.")
        budget.add_metric([], s.budget_left)
        yield from (jobs, skipped, tokens, hits, budget)
