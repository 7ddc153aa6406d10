"""Per-model batching counters, read at scrape time by the Prometheus collector."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class BatchStats:
    batches: int = 0
    items: int = 0
    failed_batches: int = 0
    failed_items: int = 0
    timed_out: int = 0
    rejected: int = 0
    compute_s: float = 0.0
    queue_wait_s: float = 0.0
    # Batches per size (size -> count): the batch-size distribution without a histogram object.
    sizes: dict[int, int] = field(default_factory=dict)

    def record_batch(self, size: int, compute_s: float, queue_wait_s: float) -> None:
        self.batches += 1
        self.items += size
        self.compute_s += compute_s
        self.queue_wait_s += queue_wait_s
        self.sizes[size] = self.sizes.get(size, 0) + 1

    def record_failure(self, size: int) -> None:
        self.failed_batches += 1
        self.failed_items += size
