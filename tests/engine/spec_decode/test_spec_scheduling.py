"""Scheduler and block manager support for speculation: lookahead slots and their rollback."""

from __future__ import annotations

from blink.engine.block_manager import BlockManager
from blink.engine.config import EngineConfig
from blink.engine.sampling_params import SamplingParams
from blink.engine.scheduler import Scheduler
from blink.engine.sequence import Sequence
from blink.engine.spec_decode.policy import SpeculationPolicy


def _decoding(scheduler: Scheduler, prompt_len: int = 6) -> Sequence:
    seq = Sequence("a", list(range(prompt_len)), SamplingParams(temperature=0.0), frozenset())
    scheduler.add(seq)
    out = scheduler.schedule()
    scheduler.update_after_step(out)
    seq.append_token(99)
    return seq


def test_lookahead_reserves_slots_and_commit_rolls_back_the_rest() -> None:
    bm = BlockManager(num_blocks=8, block_size=4, enable_prefix_caching=True)
    sched = Scheduler(EngineConfig(model="x"), bm, lookahead=lambda seq: 5)
    seq = _decoding(sched)  # 7 tokens, 6 computed
    out = sched.schedule()
    (item,) = out.scheduled
    assert (item.num_new_tokens, item.num_lookahead, out.num_batched_tokens) == (1, 5, 6)
    assert len(seq.block_table) == 3  # 6 + 1 + 5 = 12 positions
    sched.update_after_step(out)
    seq.token_ids.extend([7, 8])  # one proposal accepted + a corrected token
    sched.commit_speculation(seq, 1)
    assert seq.num_computed_tokens == 8 and seq.num_tokens == 9
    assert len(seq.block_table) == 3  # 9 tokens still need 3 blocks of 4
    seq.token_ids.pop()
    seq.token_ids.pop()
    seq.num_computed_tokens = 7
    bm.trim(seq, 7)
    assert len(seq.block_table) == 2 and bm.num_free_blocks == 6


def test_lookahead_gives_way_when_the_pool_is_short() -> None:
    bm = BlockManager(num_blocks=2, block_size=4, enable_prefix_caching=False)
    sched = Scheduler(EngineConfig(model="x"), bm, lookahead=lambda seq: 8)
    seq = _decoding(sched)
    (item,) = sched.schedule().scheduled
    assert item.num_lookahead == 0 and len(seq.block_table) == 2  # plain decode, no preemption


def test_policy_caps_and_adapts() -> None:
    running = [1]
    policy = SpeculationPolicy(max_k=6, max_batch=2, max_model_len=20, num_running=lambda: running[0])
    seq = Sequence("a", list(range(10)), SamplingParams(max_tokens=4, temperature=0.0), frozenset())
    assert policy.lookahead(seq) == 3  # max_tokens 4 leaves room for 3 proposals + 1
    seq.params.max_tokens = None
    assert policy.lookahead(seq) == 6
    policy.record("a", 6, 1, 2)  # acceptance 0.8 -> 0.61: K shrinks, speculation still pays
    assert 1 <= policy.lookahead(seq) < 6
    for _ in range(10):
        policy.record("a", 6, 0, 1)  # never accepted: proposals cost more than they save
    assert policy.lookahead(seq) == 0
    running[0] = 3
    assert policy.lookahead(seq) == 0  # batch above the limit
    running[0] = 1
    seq.params.repetition_penalty = 1.2
    assert policy.lookahead(seq) == 0  # penalties depend on every accepted token
    # 11 verify steps: 66 proposed, 1 accepted, 12 tokens emitted.
    assert policy.counters.acceptance_rate == 1 / 66 and policy.counters.tokens_per_step == 12 / 11


def test_policy_stops_speculating_below_the_cost_floor_and_probes() -> None:
    """Below 0.45 acceptance a verified token costs more than it saves (a 2-row fused step ~1.45x
    a one-row step): the request decodes plainly, proposing one token every 16th step; once probes
    are accepted again it speculates every step."""
    policy = SpeculationPolicy(max_k=4, max_batch=8, max_model_len=100, num_running=lambda: 1)
    seq = Sequence("a", list(range(10)), SamplingParams(max_tokens=None, temperature=0.0), frozenset())
    for _ in range(6):
        policy.record("a", 4, 0, 1)
    ks = [policy.lookahead(seq) for _ in range(32)]
    assert ks == ([0] * 15 + [1]) * 2
    for _ in range(6):
        policy.record("a", 1, 1, 2)  # probes accepted: the estimate recovers past the floor
    assert all(policy.lookahead(seq) >= 1 for _ in range(4))
    policy.release("a")
    assert policy.lookahead(seq) == 4  # a new request starts optimistic
