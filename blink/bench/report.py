"""JSON and Markdown reports; with two endpoints, ratios of the second against the first."""

from __future__ import annotations

from typing import Any

_METRICS = (("ttft_ms", "TTFT"), ("itl_ms", "ITL"), ("tpot_ms", "TPOT"), ("e2e_ms", "E2E"))
_COLS = ("p50", "p90", "p99", "p99.9", "mean")


def ratios(summary: dict[str, Any]) -> dict[str, float | None]:
    """Second endpoint / first, per latency percentile and throughput (< 1 latency = faster)."""
    if len(summary["endpoints"]) < 2:
        return {}
    a, b = summary["endpoints"][0], summary["endpoints"][1]
    out: dict[str, float | None] = {}
    for key, label in _METRICS:
        for col in ("p50", "p99"):
            x, y = a[key][col], b[key][col]
            out[f"{label} {col}"] = round(y / x, 3) if x and y is not None else None
    for key in ("requests_per_s", "output_tokens_per_s"):
        x, y = a["throughput"][key], b["throughput"][key]
        out[key] = round(y / x, 3) if x and y is not None else None
    return out


def _fmt(v: Any) -> str:
    if v is None:
        return "–"
    return f"{v:.1f}" if isinstance(v, float) else str(v)


def markdown(summary: dict[str, Any]) -> str:
    lines = [f"# blink bench: {summary['workload']}, {summary['load']}", ""]
    for i, ep in enumerate(summary["endpoints"]):
        lines += [f"## {'A' if i == 0 else 'B'}: {ep['base_url']} (model `{ep['model']}`)", ""]
        lines += [f"{ep['completed']} of {ep['requests']} requests completed in {ep['duration_s']:.1f} s; "
                  f"{_fmt(ep['throughput']['requests_per_s'])} req/s, "
                  f"{_fmt(ep['throughput']['output_tokens_per_s'])} output tokens/s.", ""]
        lines += ["| ms | " + " | ".join(_COLS) + " |", "|---|" + "---:|" * len(_COLS)]
        for key, label in _METRICS:
            lines.append(f"| {label} | " + " | ".join(_fmt(ep[key][c]) for c in _COLS) + " |")
        lines.append("")
        if ep["errors"] or ep["unfinished"]:
            errs = ", ".join(f"{k}: {v}" for k, v in sorted(ep["errors"].items()))
            lines += [f"Errors: {errs or 'none'}; unfinished at the time limit: {ep['unfinished']}.", ""]
        if "goodput" in ep:
            g = ep["goodput"]
            slo = ", ".join(f"{k} ≤ {v:g} ms" for k, v in g["slo_ms"].items())
            lines += [f"Goodput ({slo}): {g['good_requests']} requests ({100 * g['fraction']:.1f}%), "
                      f"{_fmt(g['requests_per_s'])} req/s.", ""]
    r = ratios(summary)
    if r:
        lines += ["## B / A (interleaved in one run)", "", "| figure | ratio |", "|---|---:|"]
        lines += [f"| {k} | {_fmt(v) if v is None else f'{v:.3f}'} |" for k, v in r.items()]
        lines.append("")
    return "\n".join(lines)
