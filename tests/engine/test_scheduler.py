"""Scheduler: budgets, chunked prefill, admission, preemption by recompute, no leaks.

A fake engine loop drives the scheduler and simulates the KV cache: each slot stores a digest of
the tokens up to its position, and every scheduled sequence's already-computed slots are checked
before its "forward". That catches any block that is shared, reused or recomputed wrongly.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import pytest

from blink.engine.block_manager import BlockManager
from blink.engine.config import EngineConfig
from blink.engine.errors import InvalidParameterError, PromptTooLongError
from blink.engine.sampling_params import SamplingParams
from blink.engine.scheduler import Scheduler, SchedulerOutput
from blink.engine.sequence import Sequence, SequenceStatus

EOS = 0
VOCAB = 50


def make_scheduler(
    num_blocks: int = 64,
    block_size: int = 4,
    max_num_seqs: int = 8,
    max_num_batched_tokens: int = 32,
    chunked: bool = True,
    prefix_caching: bool = True,
) -> Scheduler:
    cfg = EngineConfig(
        model="dummy",
        block_size=block_size,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        enable_chunked_prefill=chunked,
        enable_prefix_caching=prefix_caching,
    )
    return Scheduler(cfg, BlockManager(num_blocks, block_size, prefix_caching))


def make_seq(rid: str, prompt: list[int], max_tokens: int = 4) -> Sequence:
    return Sequence(rid, prompt, SamplingParams(max_tokens=max_tokens), frozenset({EOS}))


def next_token(tokens: list[int]) -> int:
    """Deterministic 'model': depends on the whole history, never EOS."""
    return 1 + (sum(t * (i + 1) for i, t in enumerate(tokens)) % (VOCAB - 1))


@dataclass
class FakeEngine:
    sched: Scheduler
    kv: dict[tuple[int, int], tuple[int, ...]] = field(default_factory=dict)
    outputs: dict[str, list[int]] = field(default_factory=dict)
    steps: list[SchedulerOutput] = field(default_factory=list)

    def step(self) -> SchedulerOutput:
        out = self.sched.schedule()
        self.steps.append(out)
        cfg = self.sched.config
        bs = self.sched.block_manager.block_size
        assert out.num_batched_tokens == sum(s.num_new_tokens for s in out.scheduled)
        assert len(out.scheduled) <= cfg.max_num_seqs
        assert len({s.seq.request_id for s in out.scheduled}) == len(out.scheduled)
        for s in out.scheduled:
            seq = s.seq
            assert s.num_new_tokens > 0
            end = seq.num_computed_tokens + s.num_new_tokens
            assert end <= seq.num_tokens
            assert len(seq.block_table) * bs >= end
            for pos in range(seq.num_computed_tokens):  # KV we rely on must be right
                slot = (seq.block_table[pos // bs], pos % bs)
                assert self.kv.get(slot) == tuple(seq.token_ids[: pos + 1]), (seq, pos)
            for pos in range(seq.num_computed_tokens, end):
                self.kv[(seq.block_table[pos // bs], pos % bs)] = tuple(seq.token_ids[: pos + 1])
        self.sched.update_after_step(out)
        for s in out.scheduled:
            seq = s.seq
            if seq.status is not SequenceStatus.RUNNING or not seq.is_prefill_done:
                continue
            seq.append_token(next_token(seq.token_ids))
            reason = seq.check_stop(max_model_len=0)
            if reason:
                self.sched.finish(seq, reason)
        for seq in list(out.finished) + [s.seq for s in out.scheduled]:
            if seq.is_finished:
                self.outputs[seq.request_id] = seq.output_token_ids
        return out

    def run(self, max_steps: int = 10_000) -> None:
        for _ in range(max_steps):
            if not self.sched.has_unfinished():
                return
            self.step()
        raise AssertionError("scheduler did not drain")


def assert_no_leaks(sched: Scheduler) -> None:
    bm = sched.block_manager
    assert bm.num_free_blocks == bm.num_blocks
    assert all(b.ref_count == 0 for b in bm.blocks)
    assert sched.num_running == 0 and sched.num_waiting == 0


def reference_output(prompt: list[int], max_tokens: int) -> list[int]:
    toks = list(prompt)
    for _ in range(max_tokens):
        toks.append(next_token(toks))
    return toks[len(prompt) :]


def test_decode_and_prefill_share_one_budget() -> None:
    sched = make_scheduler(max_num_batched_tokens=10)
    eng = FakeEngine(sched)
    sched.add(make_seq("a", list(range(1, 5)), max_tokens=8))
    out = eng.step()
    assert [(s.seq.request_id, s.num_new_tokens) for s in out.scheduled] == [("a", 4)]
    sched.add(make_seq("b", list(range(1, 31)), max_tokens=2))
    out = eng.step()  # a decodes first (1 token), b gets a 9-token chunk
    assert [(s.seq.request_id, s.num_new_tokens) for s in out.scheduled] == [("a", 1), ("b", 9)]
    assert out.num_batched_tokens == 10
    out = eng.step()
    assert [(s.seq.request_id, s.num_new_tokens) for s in out.scheduled] == [("a", 1), ("b", 9)]
    eng.run()
    assert eng.outputs["b"] == reference_output(list(range(1, 31)), 2)
    assert_no_leaks(sched)


def test_chunked_prefill_emits_no_token_before_prompt_done() -> None:
    sched = make_scheduler(max_num_batched_tokens=8)
    eng = FakeEngine(sched)
    prompt = list(range(1, 21))
    seq = make_seq("a", prompt, max_tokens=3)
    sched.add(seq)
    chunks = []
    while seq.num_output_tokens == 0:
        chunks.append(eng.step().scheduled[0].num_new_tokens)
    assert chunks == [8, 8, 4]
    eng.run()
    assert eng.outputs["a"] == reference_output(prompt, 3)
    assert_no_leaks(sched)


def test_unchunked_prompt_is_scheduled_whole() -> None:
    sched = make_scheduler(max_num_batched_tokens=16, chunked=False)
    eng = FakeEngine(sched)
    sched.add(make_seq("a", list(range(1, 5)), max_tokens=6))
    eng.step()
    sched.add(make_seq("b", list(range(10, 24)), max_tokens=2))  # 14 tokens
    sched.add(make_seq("c", list(range(30, 39)), max_tokens=2))  # 9: does not fit after b
    out = eng.step()
    assert [(s.seq.request_id, s.num_new_tokens) for s in out.scheduled] == [("a", 1), ("b", 14)]
    out = eng.step()
    assert [(s.seq.request_id, s.num_new_tokens) for s in out.scheduled] == [("a", 1), ("b", 1), ("c", 9)]
    eng.run()
    assert_no_leaks(sched)


def test_unchunked_prompt_larger_than_budget_runs_alone() -> None:
    sched = make_scheduler(max_num_batched_tokens=8, chunked=False)
    eng = FakeEngine(sched)
    sched.add(make_seq("big", list(range(1, 21)), max_tokens=2))
    sched.add(make_seq("small", [1, 2], max_tokens=2))
    out = eng.step()
    assert [(s.seq.request_id, s.num_new_tokens) for s in out.scheduled] == [("big", 20)]
    eng.run()
    assert eng.outputs["big"] == reference_output(list(range(1, 21)), 2)
    assert_no_leaks(sched)


def test_max_num_seqs_caps_running() -> None:
    sched = make_scheduler(max_num_seqs=3, max_num_batched_tokens=100)
    eng = FakeEngine(sched)
    for i in range(5):
        sched.add(make_seq(f"r{i}", [i + 1, 2, 3], max_tokens=3))
    out = eng.step()
    assert len(out.scheduled) == 3
    assert sched.num_running == 3 and sched.num_waiting == 2
    while sched.has_unfinished():
        out = eng.step()
        assert sched.num_running <= 3
    assert set(eng.outputs) == {f"r{i}" for i in range(5)}
    assert_no_leaks(sched)


def test_abort_frees_blocks_at_once() -> None:
    sched = make_scheduler()
    eng = FakeEngine(sched)
    sched.add(make_seq("a", list(range(1, 10)), max_tokens=50))
    sched.add(make_seq("b", list(range(1, 4)), max_tokens=50))
    eng.step()
    eng.step()
    sched.add(make_seq("w", [5, 6], max_tokens=5))
    aborted = sched.abort("a")
    assert aborted is not None and aborted.finish_reason == "abort" and aborted.block_table == []
    assert sched.abort("a") is None
    assert sched.abort("w") is not None  # waiting requests abort too
    assert sched.abort("b") is not None
    assert_no_leaks(sched)
    assert not sched.has_unfinished()


def test_abort_between_schedule_and_update_is_safe() -> None:
    sched = make_scheduler()
    sched.add(make_seq("a", list(range(1, 10))))
    out = sched.schedule()
    sched.abort("a")
    sched.update_after_step(out)
    assert_no_leaks(sched)


def test_preemption_recomputes_and_preserves_output() -> None:
    # 6 blocks of 4 = 24 slots; three requests growing to 4 + 12 = 16 tokens cannot all fit.
    sched = make_scheduler(num_blocks=6, max_num_batched_tokens=64)
    eng = FakeEngine(sched)
    prompts = {f"r{i}": [i + 1, 7, 7, 7] for i in range(3)}
    for rid, p in prompts.items():
        sched.add(make_seq(rid, p, max_tokens=12))
    eng.run()
    preempted = [s for out in eng.steps for s in out.preempted]
    assert preempted, "test must exercise preemption"
    assert preempted[0].request_id == "r2"  # newest first
    for rid, p in prompts.items():
        assert eng.outputs[rid] == reference_output(p, 12)
    assert_no_leaks(sched)


def test_preempted_request_goes_to_front_with_state_reset() -> None:
    sched = make_scheduler(num_blocks=4, max_num_batched_tokens=64, prefix_caching=False)
    eng = FakeEngine(sched)
    # Each fits alone (4 + 8 tokens = 3 blocks), not both together.
    sched.add(make_seq("old", [1, 2, 3, 4], max_tokens=8))
    sched.add(make_seq("new", [5, 6, 7, 8], max_tokens=8))
    sched.add(make_seq("late", [9, 9], max_tokens=1))
    while True:
        out = eng.step()
        if out.preempted:
            break
    (victim,) = out.preempted
    assert victim.request_id == "new"
    assert victim.status is SequenceStatus.WAITING
    assert victim.num_computed_tokens == 0 and victim.block_table == []
    assert victim.num_output_tokens > 0  # generated tokens kept for recompute
    assert sched.waiting[0] is victim
    assert [s.seq.request_id for s in out.scheduled] == ["old"]
    eng.run()
    assert eng.outputs["old"] == reference_output([1, 2, 3, 4], 8)
    assert eng.outputs["new"] == reference_output([5, 6, 7, 8], 8)
    assert_no_leaks(sched)


def test_request_outgrowing_pool_finishes_instead_of_looping() -> None:
    sched = make_scheduler(num_blocks=3, max_num_batched_tokens=64)
    eng = FakeEngine(sched)
    sched.add(make_seq("a", [1, 2, 3, 4], max_tokens=100))
    eng.run(max_steps=50)
    assert sched.block_manager.num_blocks * 4 == 12
    # Every slot holds KV, plus the last sampled token which never needed one.
    assert len(eng.outputs["a"]) == 12 - 4 + 1
    finished = [s for out in eng.steps for s in out.finished]
    assert [s.request_id for s in finished] == ["a"]
    assert finished[0].finish_reason == "length"
    assert_no_leaks(sched)


def test_prompt_larger_than_pool_rejected_at_add() -> None:
    sched = make_scheduler(num_blocks=2)
    with pytest.raises(PromptTooLongError):
        sched.add(make_seq("a", list(range(1, 10))))
    sched.add(make_seq("ok", list(range(1, 9))))
    with pytest.raises(InvalidParameterError):
        sched.add(make_seq("ok", [1]))  # duplicate id


def test_prefix_cache_hit_on_admission_skips_computed_tokens() -> None:
    sched = make_scheduler(max_num_batched_tokens=64)
    eng = FakeEngine(sched)
    shared = list(range(1, 13))  # 3 blocks
    sched.add(make_seq("a", shared + [40], max_tokens=2))
    eng.run()
    sched.add(make_seq("b", shared + [41, 42], max_tokens=2))
    out = eng.step()
    (s,) = out.scheduled
    assert s.seq.num_cached_tokens == 12 and s.num_new_tokens == 2
    eng.run()
    assert eng.outputs["b"] == reference_output(shared + [41, 42], 2)
    assert_no_leaks(sched)
    assert sched.block_manager.prefix_cache_hits == 12


def test_identical_prompts_in_one_step_do_not_share_unwritten_blocks() -> None:
    sched = make_scheduler(max_num_batched_tokens=64)
    eng = FakeEngine(sched)
    for rid in ("a", "b"):
        sched.add(make_seq(rid, list(range(1, 10)), max_tokens=3))
    out = eng.step()
    assert [s.num_new_tokens for s in out.scheduled] == [9, 9]
    eng.run()
    assert eng.outputs["a"] == eng.outputs["b"]
    assert_no_leaks(sched)


@pytest.mark.parametrize("chunked", [True, False])
@pytest.mark.parametrize("prefix_caching", [True, False])
@pytest.mark.parametrize("num_blocks", [12, 200])
def test_random_workload_outputs_match_reference(
    chunked: bool, prefix_caching: bool, num_blocks: int
) -> None:
    """Outputs are independent of chunking, caching and preemption; nothing leaks."""
    rng = random.Random(1234)
    sched = make_scheduler(
        num_blocks=num_blocks,
        block_size=4,
        max_num_seqs=5,
        max_num_batched_tokens=16,
        chunked=chunked,
        prefix_caching=prefix_caching,
    )
    eng = FakeEngine(sched)
    system = [rng.randrange(1, VOCAB) for _ in range(10)]
    expected: dict[str, list[int]] = {}
    pending = []
    for i in range(30):
        prompt = (system if rng.random() < 0.6 else []) + [
            rng.randrange(1, VOCAB) for _ in range(rng.randrange(1, 20))
        ]
        pending.append((f"r{i}", prompt, rng.randrange(1, 12)))
    aborted: set[str] = set()
    step = 0
    while pending or sched.has_unfinished():
        if pending and rng.random() < 0.5:
            rid, prompt, mt = pending.pop(0)
            sched.add(make_seq(rid, prompt, max_tokens=mt))
            expected[rid] = reference_output(prompt, mt)
        if step % 17 == 5 and sched.running:
            victim = rng.choice(sched.running).request_id
            sched.abort(victim)
            aborted.add(victim)
        if sched.has_unfinished():
            eng.step()
        step += 1
        assert step < 5000
    for rid, exp in expected.items():
        if rid not in aborted:
            assert eng.outputs[rid] == exp, rid
    assert_no_leaks(sched)
    if num_blocks == 12:
        assert any(out.preempted for out in eng.steps)


def test_waiting_request_grown_past_pool_is_finished_not_retried_forever() -> None:
    """A preempted request whose tokens no longer fit the pool must not block the queue."""
    sched = make_scheduler(num_blocks=3, max_num_batched_tokens=64)
    big = make_seq("big", [1, 2, 3, 4], max_tokens=100)
    sched.add(big)
    for t in range(10):  # as if it had generated 10 tokens, then been preempted
        big.append_token(t + 1)
    sched.add(make_seq("next", [9, 9], max_tokens=1))
    out = sched.schedule()
    assert [s.request_id for s in out.finished] == ["big"]
    assert big.finish_reason == "length" and big.is_finished
    assert [s.seq.request_id for s in out.scheduled] == ["next"]
