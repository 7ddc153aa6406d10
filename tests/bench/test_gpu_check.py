"""benchmarks/gpu_check.py works before a GPU is lent: its dry run does every step small on the CPU."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_dry_run_writes_every_figure(tmp_path: Path) -> None:
    out = tmp_path / "gpu"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--dry-run", "--out", str(out)],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    res = json.loads((out / "results.json").read_text())
    for arch in ("llama", "qwen2", "qwen3"):  # fp32 greedy on the same device: identical
        r = res["exactness"][arch]
        assert r["sequential_identical"] == r["of"] and r["concurrent_identical"] == r["of"]
    for side in ("blink", "transformers"):
        figures = res[side]
        assert set(figures["ttft_ms"]) == {"8", "16"} and all(v > 0 for v in figures["ttft_ms"].values())
        assert figures["decode_tok_s"] > 0 and figures["streams_tok_s"] > 0
    assert res["bound_tok_s"] > 0 and res["versions"]["torch"] == __import__("torch").__version__
    assert "TTFT ms @ 16" in (out / "results.md").read_text()
