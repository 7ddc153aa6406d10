"""A labelled histogram that takes a whole request's samples in one call.

Inter-token latency is observed once per token; prometheus-client's ``Histogram.observe``
takes a lock and walks the buckets per sample, which for a long answer is more
than everything else observability does for the request. Here a request's gaps are binned with
``bisect`` into plain lists and exported at scrape time. Writers and the scrape both run on the
gateway's event loop thread, so no lock is needed.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Iterator, Sequence

from prometheus_client.core import HistogramMetricFamily
from prometheus_client.registry import Collector


class _Series:
    __slots__ = ("counts", "total")

    def __init__(self, n: int) -> None:
        self.counts = [0] * n  # per bucket (non-cumulative), last = +Inf
        self.total = 0.0


class BulkHistogram(Collector):
    def __init__(self, name: str, doc: str, labels: Sequence[str], buckets: Sequence[float]) -> None:
        self.name, self.doc, self.labels = name, doc, list(labels)
        self.bounds = list(buckets)
        self._series: dict[tuple[str, ...], _Series] = {}

    def observe_many(self, label_values: tuple[str, ...], values: Iterable[float]) -> None:
        s = self._series.get(label_values)
        if s is None:
            s = self._series[label_values] = _Series(len(self.bounds) + 1)
        counts, bounds = s.counts, self.bounds
        total = 0.0
        for v in values:
            # bisect_left puts v == bound in that bound's bucket (Prometheus buckets are "le").
            counts[bisect_left(bounds, v)] += 1
            total += v
        s.total += total

    def describe(self) -> list[HistogramMetricFamily]:
        return [HistogramMetricFamily(self.name, self.doc, labels=self.labels)]

    def collect(self) -> Iterator[HistogramMetricFamily]:
        family = HistogramMetricFamily(self.name, self.doc, labels=self.labels)
        for label_values, s in self._series.items():
            cumulative, buckets = 0, []
            for bound, n in zip([*map(_fmt, self.bounds), "+Inf"], s.counts, strict=True):
                cumulative += n
                buckets.append((bound, cumulative))
            family.add_metric(list(label_values), buckets, s.total)
        yield family


def _fmt(bound: float) -> str:
    return repr(float(bound))
