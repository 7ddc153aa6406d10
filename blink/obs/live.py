"""Rolling per-second statistics for the live dashboard (the last few minutes, in memory).

Each wall-clock second gets a bucket of samples; a snapshot turns the buckets into series
(p50/p90/p99 TTFT and ITL, requests/s, tokens/s, engine batch and KV usage) and window totals
(cache outcomes, route split, breaker states). Memory is bounded: ``window_s`` buckets, each
holding at most ``max_samples`` latencies per kind.
"""

from __future__ import annotations

import math
import time
from array import array
from collections import Counter, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from blink.obs.trace import RequestTrace


def _samples() -> array[float]:
    return array("d")


@dataclass(slots=True)
class _Second:
    t: int
    # Packed doubles, 8 bytes a sample; a list of floats costs 32 (pointer + float object), and at
    # a few thousand streamed tokens/s that difference is the dashboard's whole memory footprint.
    ttft: array[float] = field(default_factory=_samples)
    itl: array[float] = field(default_factory=_samples)
    requests: int = 0
    errors: int = 0
    tokens: int = 0
    batch: float | None = None
    kv: float | None = None
    running: float | None = None
    # TTFT then ITL p50/p90/p99 in ms, kept once the second is over: its samples no longer change,
    # so a snapshot sorts only the current second's instead of the whole window's.
    summary: tuple[float | None, ...] | None = None


_PERCENTILES = (50, 90, 99)


def _summarize(s: _Second) -> tuple[float | None, ...]:
    out: list[float | None] = []
    for xs in (sorted(s.ttft), sorted(s.itl)):
        for p in _PERCENTILES:
            v = percentile(xs, p)
            out.append(None if v is None else round(v * 1000.0, 3))
    return tuple(out)


def percentile(sorted_xs: list[float], p: float) -> float | None:
    """Nearest-rank percentile of an already sorted list (None when empty)."""
    if not sorted_xs:
        return None
    return sorted_xs[min(len(sorted_xs) - 1, max(0, math.ceil(p / 100.0 * len(sorted_xs)) - 1))]


class LiveStats:
    # 120 s of history: exactly what the charts show (the totals are counters, not buckets);
    # 2,000 samples per second per kind keeps a bucket under 32 kB even when thousands of tokens/s
    # stream, so the whole window stays under ~4 MB (a longer window of float lists grew the
    # gateway's RSS over an overload run: RESULTS.md, "Figures behind the code's numbers", live).
    def __init__(self, window_s: int = 120, max_samples: int = 2000,
                 clock: Callable[[], float] = time.time) -> None:
        self.window_s = window_s
        self.max_samples = max_samples
        self._clock = clock
        self._seconds: deque[_Second] = deque()
        self.cache: Counter[str] = Counter()
        self.routes: Counter[str] = Counter()
        self.status: Counter[str] = Counter()
        self.breakers: dict[str, str] = {}
        self.total = 0

    def _bucket(self) -> _Second:
        now = int(self._clock())
        if not self._seconds or self._seconds[-1].t != now:
            self._seconds.append(_Second(now))
            while self._seconds and self._seconds[0].t <= now - self.window_s:
                self._seconds.popleft()
        return self._seconds[-1]

    def add(self, t: RequestTrace) -> None:
        b = self._bucket()
        b.requests += 1
        b.tokens += t.completion_tokens
        self.total += 1
        self.status[str(t.status)] += 1
        if t.status >= 400:
            b.errors += 1
        if t.ttft is not None and len(b.ttft) < self.max_samples:
            b.ttft.append(t.ttft)
        room = self.max_samples - len(b.itl)
        if room > 0:
            b.itl.extend(t.itl[:room])
        if t.cache != "none":
            self.cache[t.cache] += 1
        if t.backend:
            self.routes[t.backend] += 1
        for event, labels in t.events:
            if event == "breaker_transition":
                self.breakers[labels["backend"]] = labels["state"]

    def breaker(self, backend: str, state: str) -> None:
        self.breakers[backend] = state

    def snapshot(self, loads: Iterable[tuple[str, Any]] = ()) -> dict[str, Any]:
        """Series over the window plus totals; also samples the engine gauges into this second."""
        engines = []
        batch = kv = running = 0.0
        seen = False
        for model, load in loads:
            row: dict[str, Any] = {"model": model}
            for attr in ("running", "waiting", "kv_usage", "batch_size", "prefix_cache_hit_rate"):
                row[attr] = getattr(load, attr, None)
            engines.append(row)
            seen = True
            batch += float(row["batch_size"] or 0)
            kv = max(kv, float(row["kv_usage"] or 0))
            running += float(row["running"] or 0)
        b = self._bucket()
        if seen:
            b.batch, b.kv, b.running = batch, kv, running
        now = b.t
        by_t = {s.t: s for s in self._seconds}
        series: dict[str, list[Any]] = {k: [] for k in (
            "t", "ttft_p50", "ttft_p90", "ttft_p99", "itl_p50", "itl_p90", "itl_p99", "rps", "tps", "errors",
            "batch", "kv_usage", "running")}
        # Charts show the last 120 s (the whole window by default); the totals are counters.
        empty = (None,) * (2 * len(_PERCENTILES))
        for sec in range(now - 119, now + 1):
            s = by_t.get(sec)
            series["t"].append(sec)
            if s is None:
                row = empty
            elif s.summary is not None:
                row = s.summary
            else:
                row = _summarize(s)
                if sec < now:  # closed: no sample can join it any more
                    s.summary = row
            for i, key in enumerate(("ttft_p50", "ttft_p90", "ttft_p99", "itl_p50", "itl_p90", "itl_p99")):
                series[key].append(row[i])
            series["rps"].append(s.requests if s else 0)
            series["tps"].append(s.tokens if s else 0)
            series["errors"].append(s.errors if s else 0)
            series["batch"].append(s.batch if s else None)
            series["kv_usage"].append(s.kv if s else None)
            series["running"].append(s.running if s else None)
        return {
            "now": now,
            "series": series,
            "totals": {
                "requests": self.total,
                "status": dict(self.status),
                "cache": dict(self.cache),
                "routes": dict(self.routes),
                "breakers": dict(self.breakers),
            },
            "engines": engines,
        }
