"""ModelRunner greedy output equals transformers' greedy output, however the batch is cut.

A minimal driver stands in for the scheduler: it hands out (deliberately scattered) KV blocks,
cuts prompts into chunks and mixes prefill chunks with decodes in one ``execute`` call.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from blink.engine.config import EngineConfig
from blink.engine.errors import EngineError, KVCacheTooSmallError
from blink.engine.model_runner import ModelRunner
from blink.engine.sampling_params import SamplingParams
from blink.engine.scheduler import ScheduledSeq
from blink.engine.sequence import Sequence

ARCHS = ["tiny_llama", "tiny_qwen2", "tiny_qwen3"]
PROMPTS = [
    "def fibonacci(n):\n    ",
    "import os\nimport sys\n\nclass Reader:\n    def __init__(self, path):\n        self.path = path",
    "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
]
MAX_NEW = 12


class BlockPool:
    """Hands out block ids in shuffled order so a wrong slot or table index cannot go unnoticed."""

    def __init__(self, num_blocks: int, block_size: int, seed: int = 0) -> None:
        self.block_size = block_size
        self.free = list(range(num_blocks))
        random.Random(seed).shuffle(self.free)

    def cover(self, seq: Sequence, num_positions: int) -> None:
        while len(seq.block_table) * self.block_size < num_positions:
            seq.block_table.append(self.free.pop())


def make_seq(request_id: str, prompt: list[int]) -> Sequence:
    return Sequence(request_id, prompt, SamplingParams(temperature=0.0, max_tokens=MAX_NEW), frozenset())


def run_greedy(
    runner: ModelRunner,
    prompts: list[list[int]],
    *,
    chunk: int | None = None,
    stagger: int = 0,
    seed: int = 0,
) -> list[list[int]]:
    """Generate MAX_NEW tokens per prompt; prompt ``i`` joins at step ``i * stagger``."""
    pool = BlockPool(runner.num_blocks, runner.block_size, seed)
    seqs = [make_seq(str(i), p) for i, p in enumerate(prompts)]
    step = 0
    while any(s.num_output_tokens < MAX_NEW for s in seqs):
        batch = []
        for i, seq in enumerate(seqs):
            if step < i * stagger or seq.num_output_tokens >= MAX_NEW:
                continue
            todo = seq.num_tokens - seq.num_computed_tokens
            n = todo if chunk is None else min(chunk, todo)
            pool.cover(seq, seq.num_computed_tokens + n)
            batch.append(ScheduledSeq(seq, n))
        step += 1
        if not batch:
            continue
        logits = runner.execute(batch)
        assert logits.shape == (len(batch), runner.vocab_size) and logits.dtype == torch.float32
        for item, row in zip(batch, logits, strict=True):
            item.seq.num_computed_tokens += item.num_new_tokens
            if item.seq.num_computed_tokens == item.seq.num_tokens:
                item.seq.append_token(int(row.argmax()))
    return [s.output_token_ids for s in seqs]


def hf_greedy(path: Path, prompts: list[list[int]]) -> list[list[int]]:
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32)
    outs = []
    for prompt in prompts:
        ids = torch.tensor([prompt])
        # eos_token_id=None: run the full length, as the driver does (it never stops on eos).
        out = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=MAX_NEW,
            do_sample=False,
            eos_token_id=None,
        )
        outs.append(out[0, len(prompt) :].tolist())
        assert len(outs[-1]) == MAX_NEW and len(set(outs[-1])) >= 3  # a degenerate model proves little
    return outs


@pytest.fixture(scope="module", params=ARCHS)
def case(request: pytest.FixtureRequest) -> tuple[ModelRunner, list[list[int]], list[list[int]]]:
    torch.set_num_threads(1)
    path: Path = request.getfixturevalue(request.param)
    tok = AutoTokenizer.from_pretrained(str(path))
    prompts = [tok.encode(p) for p in PROMPTS]
    runner = ModelRunner(
        EngineConfig(model=str(path), dtype="float32", block_size=4, kv_cache_memory_bytes=4 << 20)
    )
    return runner, prompts, hf_greedy(path, prompts)


def test_one_at_a_time(case: tuple[ModelRunner, list[list[int]], list[list[int]]]) -> None:
    runner, prompts, expected = case
    assert [run_greedy(runner, [p])[0] for p in prompts] == expected


def test_chunked_prefill(case: tuple[ModelRunner, list[list[int]], list[list[int]]]) -> None:
    runner, prompts, expected = case
    assert [run_greedy(runner, [p], chunk=7, seed=1)[0] for p in prompts] == expected


def test_mixed_prefill_and_decode_batch(case: tuple[ModelRunner, list[list[int]], list[list[int]]]) -> None:
    runner, prompts, expected = case
    assert run_greedy(runner, prompts, chunk=7, stagger=2, seed=2) == expected
    assert run_greedy(runner, prompts, seed=3) == expected


def test_runner_attributes(tiny_llama: Path) -> None:
    runner = ModelRunner(EngineConfig(model=str(tiny_llama), kv_cache_memory_bytes=1 << 20, max_model_len=64))
    assert runner.max_model_len == 64
    assert runner.dtype == torch.float32  # "auto" = the checkpoint's dtype
    assert runner.vocab_size == runner.hf_config.vocab_size
    # 2 (K and V) * 2 layers * 16 slots * 2 KV heads * 16 dims * 4 bytes = 8 KiB per block.
    assert runner.num_blocks == (1 << 20) // 8192
    assert runner.execute([]).shape == (0, runner.vocab_size)
    seq = make_seq("long", list(range(65)))
    seq.block_table = list(range(5))
    with pytest.raises(EngineError, match="max_model_len"):
        runner.execute([ScheduledSeq(seq, 65)])
    seq = make_seq("uncovered", list(range(40)))
    seq.block_table = [0]
    with pytest.raises(EngineError, match="block table"):
        runner.execute([ScheduledSeq(seq, 40)])


def test_kv_cache_too_small(tiny_llama: Path) -> None:
    with pytest.raises(KVCacheTooSmallError, match="one KV block"):
        ModelRunner(EngineConfig(model=str(tiny_llama), kv_cache_memory_bytes=1000))


def test_bfloat16_close_to_float32(tiny_qwen2: Path) -> None:
    fp32 = ModelRunner(EngineConfig(model=str(tiny_qwen2), dtype="float32", kv_cache_memory_bytes=1 << 20))
    bf16 = ModelRunner(EngineConfig(model=str(tiny_qwen2), dtype="float16", kv_cache_memory_bytes=1 << 20))
    assert bf16.dtype == torch.bfloat16  # float16 is served as bfloat16 on the CPU
    prompt = list(range(3, 40))
    logits = []
    for runner in (fp32, bf16):
        seq = make_seq("x", prompt)
        BlockPool(runner.num_blocks, runner.block_size).cover(seq, len(prompt))
        logits.append(runner.execute([ScheduledSeq(seq, len(prompt))])[0])
    assert logits[1].dtype == torch.float32
    cos = torch.nn.functional.cosine_similarity(logits[0], logits[1], dim=0)
    assert cos > 0.99
