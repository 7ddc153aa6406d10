"""Decode graphs (EngineConfig.decode_graphs): padding to buckets changes no real row.

The CPU cannot capture a CUDA graph, so these tests run the same static buffers and padding
without one ("replay"); benchmarks/gpu_check.py checks the captured graphs on a GPU.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from pydantic import ValidationError

from blink.engine.config import EngineConfig
from blink.engine.decode_graphs import BATCH_BUCKETS, bucket_at_least, width_buckets
from blink.engine.llm_engine import LLMEngine
from blink.engine.model_runner import RunSpan
from blink.engine.sampling_params import SamplingParams
from tests.engine.engine_runs import run_staggered


def _engine(path: Path, graphs: str, **kw: object) -> LLMEngine:
    cfg = EngineConfig(model=str(path), dtype="float32", threads=1, max_model_len=256, max_num_seqs=6,
                       decode_graphs=graphs, fused_decode=False, **kw)  # type: ignore[arg-type]
    return LLMEngine(cfg, path)


def test_buckets_pad_up_and_stop_at_the_largest() -> None:
    assert bucket_at_least(BATCH_BUCKETS, 1) == 1
    assert bucket_at_least(BATCH_BUCKETS, 3) == 4
    assert bucket_at_least(BATCH_BUCKETS, 17) == 24
    assert bucket_at_least(BATCH_BUCKETS, 257) is None
    assert width_buckets(16) == (1, 2, 4, 8, 16)
    assert width_buckets(10) == (1, 2, 4, 8, 10)
    assert width_buckets(1) == (1,)


@pytest.mark.parametrize("arch", ["tiny_llama", "tiny_qwen3"])
def test_padded_replay_gives_eager_greedy_tokens(arch: str, request: pytest.FixtureRequest) -> None:
    path = request.getfixturevalue(arch)
    # Staggered arrivals: batches of 1..6 (buckets 1, 2, 4, 8 capped at 6) over contexts that
    # cross width buckets (block_size 16: 1, 2, 4 ... blocks).
    prompts = [[5 + i, 6, 7, 8] * (1 + 3 * i) for i in range(6)]
    params = SamplingParams(max_tokens=40, temperature=0.0, ignore_eos=True)
    eager = run_staggered(_engine(path, "off"), prompts, params)
    replayed_engine = _engine(path, "replay")
    assert replayed_engine.runner._graphs is not None
    assert replayed_engine.runner._graphs.batch_buckets == (1, 2, 4, 6)
    replayed = run_staggered(replayed_engine, prompts, params)
    assert replayed == eager
    assert all(len(t) == 40 for t in replayed)


def test_padding_rows_write_only_the_scratch_block(tiny_llama: Path) -> None:
    engine = _engine(tiny_llama, "replay")
    runner = engine.runner
    graphs = runner._graphs
    assert graphs is not None
    assert graphs.scratch_block == runner.num_blocks
    assert runner.kv_cache.shape[2] == runner.num_blocks + 1  # the scratch block is past the pool
    # Three sequences decode at once (bucket 4: one padding row); each has 20 cached positions.
    tables = [[1, 2], [3, 4], [5, 6]]
    for i, table in enumerate(tables):
        runner.execute_spans([RunSpan(f"p{i}", [7 + j for j in range(20)], 0, table, 1)])
    before = runner.kv_cache.clone()
    logits = runner.execute_spans([RunSpan(f"p{i}", [9], 20, t, 1) for i, t in enumerate(tables)])
    assert logits.shape == (3, runner.vocab_size)
    changed = (runner.kv_cache != before).flatten(4).any(-1)  # [2, layers, blocks, block_size]
    written = changed.nonzero()[:, 2:].unique(dim=0).tolist()
    real_slots = [[t[1], 20 % 16] for t in tables]  # position 20 lives in each table's second block
    assert sorted(w for w in written if w[0] != graphs.scratch_block) == sorted(real_slots)
    assert all(w[1] == 0 for w in written if w[0] == graphs.scratch_block)


def test_decode_logits_match_the_eager_step(tiny_llama: Path) -> None:
    eager, replay = _engine(tiny_llama, "off").runner, _engine(tiny_llama, "replay").runner
    tables = [[1], [2, 3], [4, 5, 6]]
    lengths = [9, 17, 40]
    out = []
    for runner in (eager, replay):
        for i, (table, n) in enumerate(zip(tables, lengths, strict=True)):
            runner.execute_spans([RunSpan(f"q{i}", list(range(3, 3 + n)), 0, table, 1)])
        out.append(runner.execute_spans(
            [RunSpan(f"q{i}", [11], n, t, 1) for i, (t, n) in enumerate(zip(tables, lengths, strict=True))]
        ))
    torch.testing.assert_close(out[1], out[0], rtol=1e-5, atol=1e-5)


def test_unknown_decode_graphs_setting_is_refused(tiny_llama: Path) -> None:
    with pytest.raises(ValidationError, match="decode_graphs"):
        _engine(tiny_llama, "always")


def test_auto_captures_nothing_on_the_cpu(tiny_llama: Path) -> None:
    runner = _engine(tiny_llama, "auto").runner
    assert runner._graphs is None
    assert runner.kv_cache.shape[2] == runner.num_blocks


def test_scheduled_decodes_take_the_graphs_straight_and_bad_ones_are_still_refused(tiny_llama: Path) -> None:
    """``execute`` sends a plain decode step to the graphs without building spans: the same logits
    as the span path, and a sequence whose table does not cover its position is refused, not run."""
    from blink.engine.errors import EngineError
    from blink.engine.scheduler import ScheduledSeq
    from blink.engine.sequence import Sequence

    runner = _engine(tiny_llama, "replay").runner
    params = SamplingParams(max_tokens=4, temperature=0.0)
    seqs = []
    for i, (table, n) in enumerate(zip([[1], [2, 3], [4, 5, 6]], [9, 17, 40], strict=True)):
        runner.execute_spans([RunSpan(f"s{i}", list(range(3, 3 + n)), 0, table, 1)])
        seq = Sequence(f"s{i}", list(range(3, 3 + n)) + [11], params, frozenset())
        seq.block_table, seq.num_computed_tokens = list(table), n
        seqs.append(seq)
    direct = runner.execute([ScheduledSeq(s, 1) for s in seqs])
    via_spans = runner.execute_spans([RunSpan(s.request_id, [11], s.num_computed_tokens, s.block_table, 1)
                                      for s in seqs])
    torch.testing.assert_close(direct, via_spans, rtol=0, atol=0)
    seqs[1].block_table = [2]  # position 17 needs a second block
    with pytest.raises(EngineError, match="does not cover"):
        runner.execute([ScheduledSeq(s, 1) for s in seqs])
