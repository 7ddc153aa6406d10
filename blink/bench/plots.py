"""PNG plots (needs matplotlib: ``pip install 'blink-serve[bench]'``): latency CDFs, TTFT over time."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from blink.bench.runner import BenchRun


def plot(run: BenchRun, out_dir: Path) -> list[Path]:
    """Write the plots; returns their paths ([] when matplotlib is not installed)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    names = ["A", "B"]
    paths = []
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, (metric, title) in zip(axes, (("ttft", "TTFT"), ("e2e", "End-to-end")), strict=True):
        for e, results in enumerate(run.results):
            xs = np.sort([getattr(r, metric) * 1000.0 for r in results if r.ok and getattr(r, metric) is not None])
            if len(xs):
                ax.plot(xs, np.arange(1, len(xs) + 1) / len(xs), label=f"{names[e]}: {run.endpoints[e].base_url}")
        ax.set_xlabel(f"{title} (ms)")
        ax.set_ylabel("fraction of requests")
        ax.set_title(f"{title} CDF")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    paths.append(out_dir / "latency_cdf.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(11, 4))
    for e, results in enumerate(run.results):
        pts = [(r.start, r.ttft * 1000.0) for r in results if r.ok and r.ttft is not None]
        if pts:
            t, y = zip(*pts, strict=True)
            ax.scatter(t, y, s=8, label=f"{names[e]}: {run.endpoints[e].base_url}")
    ax.set_xlabel("request start (s since the run began)")
    ax.set_ylabel("TTFT (ms)")
    ax.set_title("TTFT over time")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    paths.append(out_dir / "ttft_over_time.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)
    return paths
