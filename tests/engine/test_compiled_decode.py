"""The compiled decode forward (EngineConfig.compile) is exact: greedy tokens equal eager's."""

from __future__ import annotations

from pathlib import Path

from blink.engine.config import EngineConfig
from blink.engine.llm_engine import LLMEngine
from blink.engine.sampling_params import SamplingParams


def test_compiled_decode_greedy_matches_eager_fp32(tiny_llama: Path) -> None:
    prompts = [[5, 6, 7, 8], [9, 10, 11, 12, 13, 14, 15], [20] * 20]  # batch 1..3 as they finish
    params = SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True)
    outputs = []
    for compile_ in (False, True):
        cfg = EngineConfig(model=str(tiny_llama), dtype="float32", threads=1, max_model_len=512, compile=compile_)
        engine = LLMEngine(cfg, tiny_llama)
        assert (engine.runner.compile_seconds > 0) == compile_
        outputs.append(engine.generate(prompts, params))
    assert outputs[0] == outputs[1]
    assert all(len(o) == 24 for o in outputs[1])
