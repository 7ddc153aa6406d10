"""The compiled decode forward (EngineConfig.compile) is exact: greedy tokens equal eager's."""

from __future__ import annotations

from pathlib import Path

import pytest
from torch._dynamo.utils import counters

from blink.engine.compiled_decode import MAX_BATCH, CompiledDecode
from blink.engine.config import EngineConfig
from blink.engine.errors import EngineError
from blink.engine.llm_engine import LLMEngine
from blink.engine.sampling_params import SamplingParams


@pytest.mark.parametrize(
    ("mode", "dtype", "quantization"),
    [("layers", "float32", "none"), ("frozen", "bfloat16", "int8-dense-prefill")],
)
def test_compiled_decode_greedy_matches_eager(tiny_llama: Path, mode: str, dtype: str, quantization: str) -> None:
    prompts = [[5, 6, 7, 8], [9, 10, 11, 12, 13, 14, 15], [20] * 20]  # batch 1..3 as they finish
    params = SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True)
    outputs = []
    for compile_ in (False, True):
        cfg = EngineConfig(
            model=str(tiny_llama), dtype=dtype, threads=1, max_model_len=512,  # type: ignore[arg-type]
            quantization=quantization, compile=compile_, compile_mode=mode,
            fused_decode=False,  # the fused C++ step would serve these decodes ahead of the graph
        )
        engine = LLMEngine(cfg, tiny_llama)
        assert (engine.runner.compile_seconds > 0) == compile_
        graphs = counters["stats"]["unique_graphs"]
        outputs.append(engine.generate(prompts, params))
        # One prompt alone after the batch: the batch-1 graph, with KV written by earlier steps.
        outputs.append(engine.generate([[30, 31, 32]], params))
        # Batches of MAX_BATCH+ rows run eager (the packed GEMMs win there): nothing recompiles.
        wide = engine.generate([[40 + i, 41 + i] for i in range(MAX_BATCH + 1)], params)
        assert all(len(o) == 24 for o in wide)
        assert counters["stats"]["unique_graphs"] == graphs  # warm_up compiled every graph used
    assert outputs[0] == outputs[2]
    assert outputs[1] == outputs[3]
    assert all(len(o) == 24 for o in outputs[2])


def test_unknown_compile_mode_is_an_engine_error(tiny_llama: Path) -> None:
    cfg = EngineConfig(model=str(tiny_llama), dtype="float32", threads=1, max_model_len=512)
    engine = LLMEngine(cfg, tiny_llama)
    with pytest.raises(EngineError, match="compile_mode"):
        CompiledDecode(engine.runner.model, "cudagraphs")
