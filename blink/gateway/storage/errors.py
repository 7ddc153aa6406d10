"""Where shared-store failures are counted (``blink_store_errors_total{store,op}``).

Stores are built before the app's metrics registry exists, so they report to this relay,
which forwards to the metrics once the front is bound to them and keeps its own counts
(what a test or the dashboard reads).
"""

from __future__ import annotations

from collections import Counter
from typing import Protocol


class StoreErrorSink(Protocol):
    def store_error(self, store: str, op: str) -> None: ...


class StoreErrorRelay:
    def __init__(self) -> None:
        self.counts: Counter[tuple[str, str]] = Counter()
        self._sink: StoreErrorSink | None = None

    def bind(self, sink: StoreErrorSink) -> None:
        self._sink = sink

    def store_error(self, store: str, op: str) -> None:
        self.counts[(store, op)] += 1
        if self._sink is not None:
            self._sink.store_error(store, op)
