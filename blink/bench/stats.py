"""Percentiles, throughput, error breakdown and goodput from a run's results."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from blink.bench.client import RequestResult

PERCENTILES = (50, 90, 99, 99.9)


def distribution(values_s: list[float]) -> dict[str, float | None]:
    """Milliseconds: mean and p50/p90/p99/p99.9 (linear interpolation, as numpy and vLLM do)."""
    if not values_s:
        return {"count": 0, "mean": None, **{f"p{p:g}": None for p in PERCENTILES}}
    arr = np.asarray(values_s, dtype=np.float64) * 1000.0
    out: dict[str, float | None] = {"count": len(values_s), "mean": round(float(arr.mean()), 3)}
    for p in PERCENTILES:
        out[f"p{p:g}"] = round(float(np.percentile(arr, p)), 3)
    return out


def meets_slo(r: RequestResult, slo: dict[str, float]) -> bool:
    """A request is good when every SLO holds: TTFT, end-to-end, mean time per output token, and
    inter-token latency judged on the request's own p99 gap (one GC pause does not fail a long answer)."""
    if not r.ok:
        return False
    if "ttft" in slo and (r.ttft is None or r.ttft > slo["ttft"]):
        return False
    if "e2e" in slo and (r.e2e is None or r.e2e > slo["e2e"]):
        return False
    if "tpot" in slo and r.tpot is not None and r.tpot > slo["tpot"]:
        return False
    return not ("itl" in slo and r.itl and float(np.percentile(r.itl, 99)) > slo["itl"])


def summarize(results: list[RequestResult], duration_s: float, slo: dict[str, float],
              unfinished: int = 0) -> dict[str, Any]:
    ok = [r for r in results if r.ok]
    errors = Counter(r.error for r in results if r.error is not None)
    out_tokens = sum(r.output_tokens for r in ok)
    summary: dict[str, Any] = {
        "requests": len(results) + unfinished,
        "completed": len(ok),
        "errors": dict(errors),
        "unfinished": unfinished,
        "duration_s": round(duration_s, 3),
        "throughput": {
            "requests_per_s": round(len(ok) / duration_s, 3) if duration_s > 0 else None,
            "output_tokens_per_s": round(out_tokens / duration_s, 3) if duration_s > 0 else None,
        },
        "ttft_ms": distribution([r.ttft for r in ok if r.ttft is not None]),
        "itl_ms": distribution([x for r in ok for x in r.itl]),
        "tpot_ms": distribution([t for r in ok if (t := r.tpot) is not None]),
        "e2e_ms": distribution([r.e2e for r in ok if r.e2e is not None]),
    }
    if slo:
        good = sum(1 for r in results if meets_slo(r, slo))
        summary["goodput"] = {
            "slo_ms": {k: v * 1000.0 for k, v in slo.items()},
            "good_requests": good,
            "fraction": round(good / max(1, len(results) + unfinished), 4),
            "requests_per_s": round(good / duration_s, 3) if duration_s > 0 else None,
        }
    tags = sorted({r.tag for r in ok if r.tag})
    if tags:
        summary["by_tag"] = {t: {"count": sum(1 for r in ok if r.tag == t),
                                 "ttft_ms": distribution([r.ttft for r in ok if r.tag == t and r.ttft is not None])}
                             for t in tags}
    return summary
