"""Async checks are low-priority work: they wait while the event loop is busy (proved by ordering)."""

from __future__ import annotations

import asyncio
import time

from blink.backends.base import GenerationRequest, SamplingOptions
from blink.gateway.safety.checks import SafetyPipeline, Verdict
from blink.gateway.safety.stage import SafetyStage

# Each busy step holds the loop this long: 10x the idle threshold (0.2 ms), so even a slow
# machine cannot make a probe look on time while the loop is busy.
_STEP_S = 0.002
# Busy steps in a row: ~60 ms of a loop that never parks in epoll (dozens of 1 ms probes).
_STEPS = 30


class RecordingCheck:
    name = "recording"
    thresholds: dict[str, float] = {}

    def __init__(self, events: list[str]) -> None:
        self.events = events

    async def check(self, text: str) -> Verdict:
        self.events.append(f"check:{text}")
        return Verdict()


def _req(prompt: str) -> GenerationRequest:
    return GenerationRequest(f"r-{prompt}", "m", "chat", SamplingOptions(), messages=[{"role": "user", "content": prompt}])


def _answer(text: str) -> dict[str, object]:
    return {"choices": [{"index": 0, "message": {"content": text}, "finish_reason": "stop"}]}


async def _busy(events: list[str]) -> None:
    """Streams' work, simulated: CPU in short steps, the loop always has something ready."""
    for _ in range(_STEPS):
        time.sleep(_STEP_S)  # noqa: ASYNC251 - holding the loop is the point
        await asyncio.sleep(0)
    events.append("busy_done")


async def _run(max_backlog: int, jobs: int) -> tuple[list[str], SafetyStage, list[bool]]:
    events: list[str] = []
    stage = SafetyStage(SafetyPipeline([RecordingCheck(events)]), "async", max_backlog=max_backlog)
    clean: list[bool] = []
    busy = asyncio.create_task(_busy(events))
    await asyncio.sleep(0)  # the busy work starts first, as a stream in flight would
    for i in range(jobs):
        stage.after_response(_req(f"q{i}"), "m", _answer(f"a{i}"), lambda: clean.append(True))
    await busy
    await asyncio.wait_for(stage.drain(), 10)
    return events, stage, clean


def test_checks_wait_for_a_busy_loop_then_run_all() -> None:
    events, stage, clean = asyncio.run(_run(max_backlog=1024, jobs=3))
    assert events[0] == "busy_done", events
    assert events[1:] == ["check:q0", "check:a0", "check:q1", "check:a1", "check:q2", "check:a2"]
    assert stage.counters.checked == 3 and len(clean) == 3 and stage.backlog() == 0
    assert stage.gate.deferrals > 0


def test_a_full_backlog_runs_checks_even_while_busy() -> None:
    # Deferral is bounded: at the backlog's limit the checks keep pace instead of piling up.
    events, stage, _ = asyncio.run(_run(max_backlog=2, jobs=4))
    assert events.index("check:q0") < events.index("busy_done"), events
    assert stage.counters.checked == 4


def test_checks_run_without_drain_once_the_loop_is_idle() -> None:
    async def main() -> list[str]:
        events: list[str] = []
        stage = SafetyStage(SafetyPipeline([RecordingCheck(events)]), "async")
        stage.after_response(_req("hello"), "m", _answer("world"), None)
        for _ in range(500):  # an idle loop: the probes come back on time
            if stage.counters.checked:
                break
            await asyncio.sleep(0.01)
        return events

    assert asyncio.run(main()) == ["check:hello", "check:world"]
