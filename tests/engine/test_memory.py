"""Memory stays bounded: the KV pool fits its budget and RSS does not creep with requests."""

from __future__ import annotations

import gc
from pathlib import Path

import psutil

from blink.engine.config import EngineConfig
from blink.engine.llm_engine import LLMEngine
from blink.engine.sampling_params import SamplingParams


def test_kv_pool_within_budget(tiny_llama: Path) -> None:
    budget = 3 * 1024 * 1024
    engine = LLMEngine(
        EngineConfig(model=str(tiny_llama), dtype="float32", threads=1, kv_cache_memory_bytes=budget),
        tiny_llama,
    )
    used = engine.runner.kv_cache.untyped_storage().nbytes()
    assert 0 < used <= budget
    # The pool is sized from the budget, not from a sequence count: most of it is used.
    assert used > budget * 0.9


def test_rss_flat_over_1000_sequential_requests(tiny_llama: Path) -> None:
    engine = LLMEngine(EngineConfig(model=str(tiny_llama), dtype="float32", threads=1), tiny_llama)
    proc = psutil.Process()
    params = SamplingParams(max_tokens=4, temperature=0.7, seed=1, ignore_eos=True)

    def run(start: int, count: int) -> None:
        for i in range(start, start + count):
            prompt = [(i * 7 + j) % 500 + 3 for j in range(20 + i % 13)]
            engine.add_request(f"m{i}", prompt, params)
            while engine.has_unfinished():
                engine.step()

    run(0, 200)  # warm-up: allocator pools, prefix cache fill
    gc.collect()
    before = proc.memory_info().rss
    run(200, 800)
    gc.collect()
    grown = proc.memory_info().rss - before
    assert grown < 16 * 1024 * 1024, f"RSS grew by {grown / 2**20:.1f} MiB over 800 requests"
    assert not engine.has_unfinished()
    assert engine.scheduler.num_running == 0 and engine.scheduler.num_waiting == 0
