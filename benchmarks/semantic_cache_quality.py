"""Semantic-cache quality: would a cached answer to ``a`` be served for ``b``?

Compares the usual semantic cache (cosine of all-MiniLM-L6-v2 embeddings alone, at 0.90) with
Blink's (same embeddings, its threshold, namespaces and hit guard) on the fow-cache development
pairs in ../shared/data/semantic-cache/. Prints per category how often the answer is served,
then precision, recall of true repeats and the share of traps served.

    python benchmarks/semantic_cache_quality.py [--data DIR] [--fp32] [--threshold T]

Goal (issue #4): traps served <= 2 % with recall >= 45 % (cosine-only at 0.90: 27 % / 48 %).
Conversations: a request's namespace includes the conversation before its last user turn, so
two conversations share entries only when that context is the same; within a namespace the
last user turn is embedded and guarded.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from blink.backends.base import GenerationRequest, SamplingOptions
from blink.config import SemanticCacheSettings
from blink.gateway.cache import keys
from blink.gateway.cache.embedder import OnnxEmbedder
from blink.gateway.cache.guard import same_answer

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "semantic-cache"
BASELINE_THRESHOLD = 0.90  # the usual semantic-cache setting the issue measures against


def _request(messages: list[dict[str, Any]]) -> GenerationRequest:
    return GenerationRequest("bench", "m", "chat", SamplingOptions(temperature=0.0), messages=messages)


def _report(name: str, rows: list[dict[str, Any]], served: list[bool]) -> tuple[float, float]:
    by_cat: Counter[str] = Counter()
    hits: Counter[str] = Counter()
    for r, s in zip(rows, served, strict=True):
        cat = r.get("category") or r.get("subtype") or "?"
        by_cat[(cat, r["same_answer"])] += 1  # type: ignore[index]
        hits[(cat, r["same_answer"])] += int(s)  # type: ignore[index]
    true_n = sum(1 for r in rows if r["same_answer"])
    trap_n = len(rows) - true_n
    tp = sum(1 for r, s in zip(rows, served, strict=True) if s and r["same_answer"])
    fp = sum(1 for r, s in zip(rows, served, strict=True) if s and not r["same_answer"])
    recall = tp / true_n if true_n else 0.0
    traps = fp / trap_n if trap_n else 0.0
    precision = tp / (tp + fp) if tp + fp else 1.0
    cats = "  ".join(f"{c}{'' if ok else '(trap)'} {hits[(c, ok)]}/{n}" for (c, ok), n in sorted(by_cat.items()))  # type: ignore[misc]
    print(f"  {name:<34} precision {precision:6.1%}  recall {recall:6.1%}  traps served {traps:6.1%}")
    print(f"  {'':<34} {cats}")
    return recall, traps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--fp32", action="store_true", help="fp32 embedder (default: int8, as served)")
    ap.add_argument("--threshold", type=float, default=SemanticCacheSettings().threshold)
    ap.add_argument("--onnx-dir", default="~/.blink/onnx")
    args = ap.parse_args()
    emb = OnnxEmbedder(onnx_dir=args.onnx_dir, quantize=not args.fp32)
    print(f"embedder: all-MiniLM-L6-v2 ONNX {'fp32' if args.fp32 else 'int8'}; Blink threshold {args.threshold}")

    pairs = [json.loads(line) for line in (args.data / "pairs-dev.jsonl").read_text().splitlines() if line]
    cos = [float(np.dot(emb.embed(r["a"]), emb.embed(r["b"]))) for r in pairs]
    print(f"\npairs-dev.jsonl ({len(pairs)} pairs)")
    base = _report(f"cosine-only >= {BASELINE_THRESHOLD}", pairs, [c >= BASELINE_THRESHOLD for c in cos])
    _report("cosine-only >= 0.97", pairs, [c >= 0.97 for c in cos])
    blink = _report("Blink (threshold + hit guard)", pairs,
                    [c >= args.threshold and same_answer(r["b"], r["a"], c) for r, c in zip(pairs, cos, strict=True)])
    print(f"  -> traps served: Blink {blink[1]:.1%} vs cosine-only {base[1]:.1%}; "
          f"recall {blink[0]:.1%} vs {base[0]:.1%} (goal: traps <= 2%, recall >= 45%)")

    for name in ("conv-parts-dev.jsonl", "conv-long-dev.jsonl"):
        path = args.data / name
        if not path.exists():
            continue
        rows = [json.loads(line) for line in path.read_text().splitlines() if line]
        base_served, blink_served = [], []
        for r in rows:
            ctx_a, qa = keys.split_query(_request(r["a"]))
            ctx_b, qb = keys.split_query(_request(r["b"]))
            c = float(np.dot(emb.embed(qa), emb.embed(qb)))
            base_served.append(c >= BASELINE_THRESHOLD)
            same_ns = keys.namespace("t", _request(r["a"]), ctx_a) == keys.namespace("t", _request(r["b"]), ctx_b)
            blink_served.append(same_ns and c >= args.threshold and same_answer(qb, qa, c))
        print(f"\n{name} ({len(rows)} conversation pairs)")
        _report(f"cosine-only (last turn) >= {BASELINE_THRESHOLD}", rows, base_served)
        _report("Blink (namespace + guard)", rows, blink_served)


if __name__ == "__main__":
    main()
