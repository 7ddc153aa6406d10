"""The idle class (pre-computation): it runs only when nothing else is in the engine, pauses within
one step when anyone arrives, yields its blocks first, and still finishes exactly."""

from __future__ import annotations

from test_scheduler_priority import Loop, make_scheduler, reference, seq

from blink.engine.block_manager import BlockManager
from blink.engine.config import EngineConfig
from blink.engine.scheduler import Scheduler


def test_idle_work_runs_on_an_otherwise_empty_engine_and_finishes_exactly() -> None:
    sched = make_scheduler()
    loop = Loop(sched)
    sched.add(seq("pre", [1, 2, 3], 12, "idle"))
    loop.run()
    assert loop.outputs["pre"] == reference([1, 2, 3], 12)


def test_a_user_request_pauses_idle_work_in_the_next_step() -> None:
    sched = make_scheduler()
    loop = Loop(sched)
    sched.add(seq("pre", [1, 2, 3], 40, "idle"))
    for _ in range(3):
        assert loop.step() == ["pre"]
    sched.add(seq("chat", [4, 5], 6))
    steps = []
    while "chat" not in loop.outputs:
        steps.append(loop.step())
    assert all(ids == ["chat"] for ids in steps)  # not one step shared with idle work
    assert loop.first_token_step["chat"] == loop.step_no - 5
    assert loop.step() == ["pre"]  # resumes once the user is served, keeping its KV
    loop.run()
    assert loop.outputs["pre"] == reference([1, 2, 3], 40)
    assert sched.num_preemptions == 0


def test_waiting_batch_work_also_pauses_idle_work() -> None:
    sched = make_scheduler()
    loop = Loop(sched)
    sched.add(seq("pre", [1, 2, 3], 20, "idle"))
    loop.step()
    sched.add(seq("job", [7, 8], 4, "batch"))
    ran: list[list[str]] = []
    while "job" not in loop.outputs:
        ran.append(loop.step())
    assert all("pre" not in ids for ids in ran)


def test_idle_blocks_are_taken_first_when_a_user_needs_them() -> None:
    # 6 blocks of 4 tokens: an idle request holding most of them must give way to a chat.
    cfg = EngineConfig(model="dummy", block_size=4, max_num_seqs=4, max_num_batched_tokens=32)
    sched = Scheduler(cfg, BlockManager(6, 4, False))
    loop = Loop(sched)
    sched.add(seq("pre", list(range(1, 17)), 4, "idle"))
    loop.step()
    sched.add(seq("chat", list(range(20, 36)), 4))
    loop.run()
    assert loop.outputs["chat"] == reference(list(range(20, 36)), 4)
    assert loop.outputs["pre"] == reference(list(range(1, 17)), 4)
    assert sched.num_preemptions >= 1
    assert loop.first_token_step["chat"] == 2  # the step right after it arrived
