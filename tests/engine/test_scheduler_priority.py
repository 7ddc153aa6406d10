"""Priority classes in the scheduler: batch work fills spare capacity, is preempted first, and
never delays an interactive request's first token by more than one engine step.

Deterministic: a fake engine loop (the "model" is a function of the token history) drives the
scheduler directly, and delays are counted in engine steps, never timed.
"""

from __future__ import annotations

import pytest

from blink.engine.block_manager import BlockManager
from blink.engine.config import EngineConfig
from blink.engine.errors import InvalidParameterError
from blink.engine.sampling_params import SamplingParams
from blink.engine.scheduler import Scheduler
from blink.engine.sequence import Sequence, SequenceStatus

EOS = 0
VOCAB = 50


def make_scheduler(num_blocks: int = 64, max_num_seqs: int = 4, budget: int = 16) -> Scheduler:
    cfg = EngineConfig(model="dummy", block_size=4, max_num_seqs=max_num_seqs, max_num_batched_tokens=budget)
    return Scheduler(cfg, BlockManager(num_blocks, 4, True))


def seq(rid: str, prompt: list[int], max_tokens: int, priority: str = "interactive") -> Sequence:
    return Sequence(rid, prompt, SamplingParams(max_tokens=max_tokens, priority=priority), frozenset({EOS}))


def next_token(tokens: list[int]) -> int:
    return 1 + (sum(t * (i + 1) for i, t in enumerate(tokens)) % (VOCAB - 1))


def reference(prompt: list[int], max_tokens: int) -> list[int]:
    toks = list(prompt)
    for _ in range(max_tokens):
        toks.append(next_token(toks))
    return toks[len(prompt):]


class Loop:
    """Steps the scheduler, samples a token for every sequence whose prefill is done, and
    records the step at which each request got its first token."""

    def __init__(self, sched: Scheduler) -> None:
        self.sched = sched
        self.step_no = 0
        self.first_token_step: dict[str, int] = {}
        self.outputs: dict[str, list[int]] = {}

    def step(self) -> list[str]:
        out = self.sched.schedule()
        self.step_no += 1
        bs = self.sched.block_manager.block_size
        assert len(out.scheduled) <= self.sched.config.max_num_seqs
        assert out.num_batched_tokens <= self.sched.config.max_num_batched_tokens
        for s in out.scheduled:
            assert len(s.seq.block_table) * bs >= s.seq.num_computed_tokens + s.num_new_tokens
        self.sched.update_after_step(out)
        for s in out.scheduled:
            q = s.seq
            if q.status is not SequenceStatus.RUNNING or not q.is_prefill_done:
                continue
            q.append_token(next_token(q.token_ids))
            self.first_token_step.setdefault(q.request_id, self.step_no)
            reason = q.check_stop(max_model_len=0)
            if reason:
                self.sched.finish(q, reason)
                self.outputs[q.request_id] = q.output_token_ids
        return [s.seq.request_id for s in out.scheduled]

    def run(self, max_steps: int = 5000) -> None:
        for _ in range(max_steps):
            if not self.sched.has_unfinished():
                return
            self.step()
        raise AssertionError("scheduler did not drain")


def assert_no_leaks(sched: Scheduler) -> None:
    bm = sched.block_manager
    assert bm.num_free_blocks == bm.num_blocks
    assert sched.num_running == 0 and sched.num_waiting == 0


def _interactive_first_token_steps(with_batch: bool, num_blocks: int, arrive_at: int) -> tuple[int, Loop]:
    """Steps from an interactive request's arrival to its first token, with or without a batch
    backlog that saturates slots, budget and (with few blocks) the KV pool."""
    sched = make_scheduler(num_blocks=num_blocks, max_num_seqs=4, budget=16)
    loop = Loop(sched)
    if with_batch:
        for b in range(12):
            sched.add(seq(f"b{b}", [1 + b, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11], 20, "batch"))
    for _ in range(arrive_at):
        loop.step()
    sched.add(seq("chat", list(range(5, 30)), 4))  # 25 tokens: two chunks at a 16-token budget
    start = loop.step_no
    while "chat" not in loop.first_token_step:
        loop.step()
    return loop.first_token_step["chat"] - start, loop


@pytest.mark.parametrize("num_blocks", [64, 12])  # 12 blocks: the batch backlog fills the KV pool
@pytest.mark.parametrize("arrive_at", [0, 1, 3, 7])
def test_batch_never_delays_interactive_first_token_by_more_than_one_step(num_blocks: int, arrive_at: int) -> None:
    alone, _ = _interactive_first_token_steps(False, num_blocks, arrive_at)
    loaded, loop = _interactive_first_token_steps(True, num_blocks, arrive_at)
    assert alone == 2  # the 25-token prompt needs two 16-token chunks
    assert loaded <= alone + 1
    loop.run()
    assert loop.outputs["chat"] == reference(list(range(5, 30)), 4)
    for b in range(12):  # preempted batch requests resume by recompute and still finish exactly
        assert loop.outputs[f"b{b}"] == reference([1 + b, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11], 20)
    assert_no_leaks(loop.sched)


def test_batch_fills_spare_slots_and_budget_only() -> None:
    sched = make_scheduler(max_num_seqs=4, budget=16)
    loop = Loop(sched)
    sched.add(seq("i0", [1, 2, 3], 30))
    sched.add(seq("i1", [4, 5, 6], 30))
    for b in range(6):
        sched.add(seq(f"b{b}", [7 + b, 8, 9, 10, 11, 12, 13, 14, 15, 16], 5, "batch"))
    # The step computing the interactive first tokens carries no batch work...
    assert loop.step() == ["i0", "i1"]
    # ...then the two free slots go to batch requests, with what is left of the budget (16 - 2).
    second = loop.step()
    assert second[:2] == ["i0", "i1"] and sorted(second[2:]) == ["b0", "b1"]
    assert sched.num_running == 4
    while len(loop.first_token_step) < 4:
        scheduled = loop.step()
        assert len(scheduled) <= 4 and scheduled[:2] == ["i0", "i1"]
    loop.run()
    assert all(loop.outputs[f"b{b}"] == reference([7 + b, 8, 9, 10, 11, 12, 13, 14, 15, 16], 5) for b in range(6))
    assert_no_leaks(sched)


def test_running_batch_is_preempted_for_an_interactive_slot() -> None:
    sched = make_scheduler(max_num_seqs=2, budget=16)
    loop = Loop(sched)
    sched.add(seq("b0", [1, 2, 3], 50, "batch"))
    sched.add(seq("b1", [4, 5, 6], 50, "batch"))
    loop.step()
    assert sched.num_running == 2
    sched.add(seq("chat", [7, 8, 9], 3))
    out = sched.schedule()
    assert [s.seq.request_id for s in out.scheduled] == ["chat"]  # its first-token step runs alone
    assert [q.request_id for q in out.preempted] == ["b1"]  # the newest batch request goes
    assert sched.waiting[0].request_id == "b1"
    sched.update_after_step(out)
    chat = sched.get("chat")
    assert chat is not None
    chat.append_token(next_token(chat.token_ids))  # its first token: batch work resumes next step
    assert [s.seq.request_id for s in sched.schedule().scheduled] == ["chat", "b0"]


def test_voice_is_admitted_before_interactive_before_batch() -> None:
    sched = make_scheduler(max_num_seqs=1, budget=64)
    loop = Loop(sched)
    sched.add(seq("batch", [1, 2], 1, "batch"))
    sched.add(seq("chat", [3, 4], 1))
    sched.add(seq("voice", [5, 6], 1, "voice"))
    order = [loop.step()[0] for _ in range(3)]
    assert order == ["voice", "chat", "batch"]
    assert sched.admitted_by_rank == [1, 1, 1, 0]
    assert all(w >= 0.0 for w in sched.wait_s_by_rank)
    assert_no_leaks(sched)


def test_queue_depth_by_class() -> None:
    sched = make_scheduler(max_num_seqs=1)
    for rid, prio in [("a", "batch"), ("b", "batch"), ("c", "interactive"), ("d", "voice")]:
        sched.add(seq(rid, [1, 2], 1, prio))
    assert [q.request_id for q in sched.waiting] == ["d", "c", "a", "b"]
    assert sched.waiting_by_rank() == [1, 1, 2, 0]
    sched.schedule()
    assert sched.running_by_rank() == [1, 0, 0, 0] and sched.waiting_by_rank() == [0, 1, 2, 0]


def test_unknown_priority_is_rejected_with_the_field_name() -> None:
    with pytest.raises(InvalidParameterError) as exc:
        SamplingParams(priority="urgent").validate()
    assert exc.value.param == "priority"


def test_max_batch_seqs_caps_the_batch_lane_only() -> None:
    cfg = EngineConfig(model="dummy", block_size=4, max_num_seqs=8, max_num_batched_tokens=64, max_batch_seqs=2)
    sched = Scheduler(cfg, BlockManager(64, 4, True))
    loop = Loop(sched)
    for b in range(5):
        sched.add(seq(f"b{b}", [1 + b, 2, 3], 6, "batch"))
    for c in range(3):
        sched.add(seq(f"c{c}", [9, 8 + c], 6))
    while sched.has_unfinished():
        loop.step()
        assert sched.running_by_rank()[2] <= 2  # never more than two batch sequences at once
    assert len(loop.outputs) == 8
    assert loop.first_token_step["c2"] == 1  # interactive requests are not capped
    assert_no_leaks(sched)


def test_max_batch_tokens_spreads_batch_prefill_over_short_steps() -> None:
    cfg = EngineConfig(model="dummy", block_size=4, max_num_seqs=8, max_num_batched_tokens=64, max_batch_tokens=12)
    sched = Scheduler(cfg, BlockManager(64, 4, True))
    loop = Loop(sched)
    prompts = {f"b{b}": [1 + b] + list(range(2, 11)) for b in range(4)}  # 10 tokens each
    for rid, p in prompts.items():
        sched.add(seq(rid, p, 3, "batch"))
    while sched.has_unfinished():
        out_before = sched.schedule()
        assert out_before.num_batched_tokens <= 12
        sched.update_after_step(out_before)
        for s in out_before.scheduled:
            q = s.seq
            if q.is_prefill_done and q.status is SequenceStatus.RUNNING:
                q.append_token(next_token(q.token_ids))
                if q.check_stop(0):
                    sched.finish(q, "length")
                    loop.outputs[q.request_id] = q.output_token_ids
    assert all(loop.outputs[r] == reference(p, 3) for r, p in prompts.items())
    assert_no_leaks(sched)


def bulk(rid: str, prompt: list[int], max_tokens: int, priority: str = "interactive", group: str = "hog",
         lead: bool = False) -> Sequence:
    """A sequence of a multi-sequence request: its first (``lead``) or one of the bulk others."""
    params = SamplingParams(max_tokens=max_tokens, priority=priority, group=group, bulk=not lead)
    return Sequence(rid, prompt, params, frozenset({EOS}))


def test_bulk_sequences_never_share_a_step_with_an_interactive_first_token() -> None:
    """An n>1 request's extra choices (bulk) yield like batch work while a chat runs, and a stream
    of chats arriving one after another never sees them in a step that computes its first token."""
    cfg = EngineConfig(model="dummy", block_size=4, max_num_seqs=8, max_num_batched_tokens=32, max_batch_seqs=2)
    sched = Scheduler(cfg, BlockManager(128, 4, True))
    loop = Loop(sched)
    hog = [f"h{k}" for k in range(6)]
    sched.add(bulk(hog[0], [3, 1, 4], 40, lead=True))  # the hog's first choice is a fair share: interactive
    for rid in hog[1:]:
        sched.add(bulk(rid, [3, 1, 4], 40))
    chats: list[str] = []
    overlaps = 0  # first-token steps taken while bulk work was running
    for step in range(300):
        if step % 3 == 0 and len(chats) < 40:
            chats.append(f"c{len(chats)}")
            sched.add(seq(chats[-1], [5, 9, 2, 6], 2))
        out = sched.schedule()
        ids = [s.seq.request_id for s in out.scheduled]
        if any(s.seq.num_output_tokens == 0 and s.seq.request_id in chats for s in out.scheduled):
            assert not set(ids) & set(hog[1:]), ids  # a chat's first-token step carries no bulk work
            overlaps += any(q.request_id in hog[1:] for q in sched.running)
        sched.update_after_step(out)
        for s in out.scheduled:
            q = s.seq
            if q.status is SequenceStatus.RUNNING and q.is_prefill_done:
                q.append_token(next_token(q.token_ids))
                loop.first_token_step.setdefault(q.request_id, step)
                if q.check_stop(0):
                    sched.finish(q, "length")
                    loop.outputs[q.request_id] = q.output_token_ids
        if not sched.has_unfinished():
            break
    assert overlaps > 10
    # Chats stopped arriving, so the bulk work then ran as the class it asked for and finished exactly.
    assert sorted(loop.outputs) == sorted(hog + chats)
    assert all(loop.outputs[h] == reference([3, 1, 4], 40) for h in hog)
    assert all(loop.outputs[c] == reference([5, 9, 2, 6], 2) for c in chats)
    assert_no_leaks(sched)


def test_bulk_runs_as_its_own_class_on_an_idle_engine() -> None:
    """With no other urgent work, bulk sequences are not held to the batch lane's cap; they go back
    to the batch lane the step a chat arrives, and return to their class when it is done."""
    cfg = EngineConfig(model="dummy", block_size=4, max_num_seqs=8, max_num_batched_tokens=64, max_batch_seqs=1)
    sched = Scheduler(cfg, BlockManager(128, 4, True))
    loop = Loop(sched)
    for k in range(4):
        sched.add(bulk(f"h{k}", [2, 7, 1 + k], 30))
    loop.step()
    assert sched.running_by_rank() == [0, 4, 0, 0]  # all four at once, as interactive work
    sched.add(seq("chat", [8, 8, 8], 3))
    assert loop.step() == ["chat"]  # the chat's first-token step runs without them
    assert sched.running_by_rank() == [0, 1, 4, 0]  # demoted, not preempted (slots and blocks suffice)
    while "chat" not in loop.outputs:
        loop.step()
    loop.step()
    assert sched.running_by_rank() == [0, 4, 0, 0]
    loop.run()
    assert all(loop.outputs[f"h{k}"] == reference([2, 7, 1 + k], 30) for k in range(4))
    assert_no_leaks(sched)


def test_bulk_batch_and_voice_keep_their_lanes() -> None:
    """A bulk sequence that asked for the batch lane stays there; a voice one is demoted only while
    other urgent work is left, and a bulk sequence never counts as that work itself."""
    sched = make_scheduler(max_num_seqs=4, budget=64)
    sched.add(bulk("v1", [1, 2], 5, "voice"))
    sched.add(bulk("b1", [3, 4], 5, "batch"))
    sched.schedule()
    assert (sched.get("v1").priority_rank, sched.get("b1").priority_rank) == (0, 2)  # type: ignore[union-attr]
    sched.add(seq("chat", [5, 6], 5))
    sched.schedule()
    assert sched.get("v1").priority_rank == 2  # type: ignore[union-attr]
    sched.abort("chat")
    sched.schedule()
    assert sched.get("v1").priority_rank == 0  # type: ignore[union-attr]


def test_a_requests_own_first_sequence_does_not_demote_its_others() -> None:
    """n=4 on an idle engine runs its four choices together; another request's chat demotes the
    three bulk ones, whose own lead never does."""
    cfg = EngineConfig(model="dummy", block_size=4, max_num_seqs=8, max_num_batched_tokens=64, max_batch_seqs=1)
    sched = Scheduler(cfg, BlockManager(128, 4, True))
    loop = Loop(sched)
    sched.add(bulk("n0", [4, 4, 4], 20, lead=True))
    for k in range(1, 4):
        sched.add(bulk(f"n{k}", [4, 4, 4], 20))
    sched.add(bulk("m0", [6, 6], 20, group="other", lead=True))
    assert loop.step() == ["n0", "m0"]  # m0 (another request) demotes n1-n3 out of the first-token step
    assert sched.waiting_by_rank() == [0, 0, 3, 0]
    loop.run()
    sched.add(bulk("n0", [4, 4, 4], 20, lead=True))
    for k in range(1, 4):
        sched.add(bulk(f"n{k}", [4, 4, 4], 20))
    assert sorted(loop.step()) == ["n0", "n1", "n2", "n3"]
    assert sched.running_by_rank() == [0, 4, 0, 0]
    loop.run()
    assert_no_leaks(sched)
