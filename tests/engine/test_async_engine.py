"""The async front over a real engine-core process: streaming, abort, concurrency, death."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest

from blink.engine.async_engine import AsyncEngine
from blink.engine.config import EngineConfig
from blink.engine.errors import EngineDeadError, InvalidParameterError
from blink.engine.sampling_params import SamplingParams

GREEDY = SamplingParams(max_tokens=20, temperature=0.0, ignore_eos=True)


@pytest.fixture
async def engine(tiny_llama: Path):
    eng = AsyncEngine(
        EngineConfig(
            model=str(tiny_llama), dtype="float32", threads=1, max_model_len=512, enable_prefix_caching=False
        )
    )
    await eng.start()
    try:
        yield eng
    finally:
        await eng.shutdown()


async def _collect(
    eng: AsyncEngine, rid: str, prompt: list[int], params: SamplingParams
) -> tuple[list[int], str]:
    ids: list[int] = []
    text = ""
    async for out in eng.generate(rid, prompt, params):
        ids += out.new_token_ids
        text += out.text
    return ids, text


async def test_stream_matches_sync_engine(engine: AsyncEngine, tiny_llama: Path) -> None:
    from blink.engine.llm_engine import LLMEngine

    prompt = engine.encode_chat([{"role": "user", "content": "print the sum of a list"}])
    ids, text = await _collect(engine, "a", prompt, GREEDY)
    sync = LLMEngine(
        EngineConfig(model=str(tiny_llama), dtype="float32", threads=1, max_model_len=512), tiny_llama
    )
    assert ids == sync.generate([prompt], GREEDY)[0]
    assert text == engine.tokenizer.decode(ids)


async def test_concurrent_requests_each_get_their_own_stream(engine: AsyncEngine) -> None:
    prompts = [engine.encode_prompt(f"import module{i} as m") for i in range(8)]
    solo = [await _collect(engine, f"solo{i}", p, GREEDY) for i, p in enumerate(prompts)]
    together = await asyncio.gather(*[_collect(engine, f"c{i}", p, GREEDY) for i, p in enumerate(prompts)])
    assert list(together) == solo


async def test_abort_frees_blocks(engine: AsyncEngine) -> None:
    prompt = engine.encode_prompt("while True: pass " * 10)
    params = SamplingParams(max_tokens=400, temperature=0.0, ignore_eos=True)
    gen = engine.generate("long", prompt, params)
    got = 0
    async for _ in gen:
        got += 1
        if got == 3:
            break
    await gen.aclose()
    # The core frees the blocks before its next step; stats arrive with the next output batch,
    # so run one short request to observe them.
    await _collect(engine, "probe", engine.encode_prompt("x"), SamplingParams(max_tokens=1, temperature=0))
    assert engine.stats.num_running == 0
    assert engine.stats.kv_usage == 0.0


async def test_errors_come_before_the_stream(engine: AsyncEngine) -> None:
    with pytest.raises(InvalidParameterError) as exc:
        async for _ in engine.generate("bad", [1, 2], SamplingParams(top_p=0)):
            pass
    assert exc.value.param == "top_p"


async def test_engine_death_fails_inflight_requests(tiny_llama: Path) -> None:
    eng = AsyncEngine(EngineConfig(model=str(tiny_llama), dtype="float32", threads=1, max_model_len=512))
    await eng.start()
    try:
        prompt = eng.encode_prompt("def f(x): return x")
        gen = eng.generate(
            "d", prompt, SamplingParams(max_tokens=100000 // 1000, temperature=0.0, ignore_eos=True)
        )
        os.kill(eng.pid, signal.SIGKILL)
        with pytest.raises(EngineDeadError):
            async for _ in gen:
                pass
        assert not eng.is_alive()
    finally:
        await eng.shutdown()


async def test_engine_core_runs_at_the_configured_niceness(tiny_llama: Path) -> None:
    eng = AsyncEngine(EngineConfig(model=str(tiny_llama), dtype="float32", threads=1, max_model_len=512, engine_nice=5))
    await eng.start()
    try:
        assert eng.pid is not None
        # The core process is niced relative to its parent; the gateway itself keeps its priority.
        assert os.getpriority(os.PRIO_PROCESS, eng.pid) == os.getpriority(os.PRIO_PROCESS, 0) + 5
        ids, _ = await _collect(eng, "n", eng.encode_prompt("def f(x):"), GREEDY)
        assert len(ids) == GREEDY.max_tokens
    finally:
        await eng.shutdown()


async def test_stats_follow_an_abort_without_another_request(engine: AsyncEngine) -> None:
    gen = engine.generate("abandoned", engine.encode_prompt("while True: pass"),
                          SamplingParams(max_tokens=400, temperature=0.0, ignore_eos=True))
    async for _ in gen:
        break
    assert engine.stats.num_running == 1
    await gen.aclose()
    # The core reports its idle state itself: the gauges must not keep the aborted request.
    deadline = asyncio.get_running_loop().time() + 20
    while engine.stats.num_running and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.02)
    assert (engine.stats.num_running, engine.stats.num_waiting, engine.stats.kv_usage) == (0, 0, 0.0)


async def test_death_is_reported_and_restart_brings_a_new_core(engine: AsyncEngine) -> None:
    old = engine.pid
    assert old is not None
    gen = engine.generate("r", engine.encode_prompt("x"), SamplingParams(max_tokens=400, ignore_eos=True))
    await gen.__anext__()
    os.kill(old, signal.SIGKILL)
    await asyncio.wait_for(engine.wait_dead(), 30)
    assert not engine.is_alive()
    assert engine.stats.num_running == 0  # the dead core's gauges are dropped, not kept
    with pytest.raises(EngineDeadError):
        async for _ in gen:
            pass
    await engine.restart()
    assert engine.is_alive() and engine.pid not in (None, old)
    ids, _ = await _collect(engine, "after", engine.encode_prompt("x"), GREEDY)
    assert len(ids) == GREEDY.max_tokens


@pytest.mark.parametrize("fault", [signal.SIGSTOP, signal.SIGKILL], ids=["stopped", "killed"])
async def test_shutdown_is_bounded_whatever_the_core_state(tiny_llama: Path, fault: signal.Signals) -> None:
    eng = AsyncEngine(EngineConfig(model=str(tiny_llama), dtype="float32", threads=1, max_model_len=512))
    await eng.start()
    pid = eng.pid
    assert pid is not None
    os.kill(pid, fault)  # hung (stopped) or gone: neither may make shutdown wait forever
    await asyncio.wait_for(eng.shutdown(), 15)
    assert not Path(f"/proc/{pid}").exists()  # killed and reaped


async def _hung_engine(tiny_llama: Path, timeout_s: float) -> AsyncEngine:
    eng = AsyncEngine(EngineConfig(model=str(tiny_llama), dtype="float32", threads=1, max_model_len=512,
                                   enable_prefix_caching=False, step_timeout_s=timeout_s))
    await eng.start()
    return eng


async def test_a_core_that_stops_stepping_is_killed_and_its_requests_fail(tiny_llama: Path) -> None:
    """A stopped core (alive, silent) with work in hand: its requests end with EngineDeadError
    instead of waiting forever and it is killed (the supervisor's restart after it is tested over
    HTTP in tests/backends/test_engine_supervisor.py)."""
    eng = await _hung_engine(tiny_llama, timeout_s=1.0)
    try:
        old = eng.pid
        assert old is not None
        gen = eng.generate("r", eng.encode_prompt("x"), SamplingParams(max_tokens=400, ignore_eos=True))
        await gen.__anext__()
        os.kill(old, signal.SIGSTOP)
        with pytest.raises(EngineDeadError, match="no step"):
            async for _ in gen:
                pass
        await asyncio.wait_for(eng.wait_dead(), 10)
        for _ in range(100):
            if not Path(f"/proc/{old}").exists() or "Z" in Path(f"/proc/{old}/stat").read_text().split()[2]:
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("the hung core was not killed")
        assert not eng.is_alive()
    finally:
        await eng.shutdown()


async def test_an_idle_core_and_a_slow_reader_are_not_taken_for_a_hang(tiny_llama: Path) -> None:
    eng = await _hung_engine(tiny_llama, timeout_s=1.0)
    try:
        await asyncio.sleep(1.5)  # idle: no work in hand, silence is fine
        assert eng.is_alive()
        gen = eng.generate("slow", eng.encode_prompt("x"), SamplingParams(max_tokens=5, ignore_eos=True))
        first = await gen.__anext__()
        await asyncio.sleep(1.5)  # the core finishes; this reader takes its time
        rest = [out async for out in gen]
        assert len(first.new_token_ids) + sum(len(o.new_token_ids) for o in rest) == 5
        assert eng.is_alive()
    finally:
        await eng.shutdown()
