"""Time llama.cpp (``llama-cpp-python``) on the prompts engine_vs_peers.py sends; print JSON figures.

Runs in the peers' environment (``/work/peers-venv``: llama-cpp-python + gguf), never in Blink's:
llama-cpp-python compiles for minutes and is no Blink dependency. Reads one JSON object on
stdin: ``{"gguf", "threads", "ttft": {n: [prompts]}, "warm", "decode", "decode_tokens",
"decode_reps", "streams": [prompts], "stream_tokens"}``; writes ``{"ttft_ms": {n: ms}, "decode_tok_s",
"agg_tok_s"}``. Weights are loaded without repacking: its repacked Q8_0/Q4_0 layouts crashed at
the first decode on an AMX CPU (benchmarks/RESULTS.md, "Figures behind the code's numbers", peers).
"""

from __future__ import annotations

import json
import statistics
import sys
import time

from llama_cpp import Llama


def main() -> None:
    job = json.load(sys.stdin)
    llm = Llama(model_path=job["gguf"], n_threads=job["threads"], n_threads_batch=job["threads"], n_ctx=2048,
                n_batch=1024, verbose=False, use_extra_bufts=False)

    def gen(prompt: list[int], n: int) -> tuple[float, float]:
        """(seconds to the first token, seconds for the rest)."""
        llm.reset()
        t0 = time.perf_counter()
        first = None
        count = 0
        for _tok in llm.generate(prompt, temp=0.0, top_k=1, reset=True):
            count += 1
            if first is None:
                first = time.perf_counter()
            if count >= n:
                break
        assert first is not None
        return first - t0, time.perf_counter() - first

    gen(job["warm"], 2)
    ttft = {n: statistics.median(gen(p, 1)[0] * 1000 for p in prompts) for n, prompts in job["ttft"].items()}
    rest = statistics.median(gen(job["decode"], job["decode_tokens"])[1] for _ in range(job.get("decode_reps", 1)))
    # One llama.cpp context serves streams one after another (its Python API has no batching).
    t0 = time.perf_counter()
    for p in job["streams"]:
        gen(p, job["stream_tokens"])
    agg = len(job["streams"]) * job["stream_tokens"] / (time.perf_counter() - t0)
    json.dump({"ttft_ms": ttft, "decode_tok_s": (job["decode_tokens"] - 1) / rest, "agg_tok_s": agg}, sys.stdout)


if __name__ == "__main__":
    main()
