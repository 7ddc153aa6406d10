"""The embedded engine behind the Backend protocol: deltas, n choices, usage, errors, abort."""

from __future__ import annotations

from pathlib import Path

import pytest

from blink.backends.base import Backend, GenerationRequest, SamplingOptions
from blink.backends.embedded import EmbeddedBackend
from blink.engine.config import EngineConfig
from blink.protocol.errors import ContextLengthExceededError, InvalidRequestError


@pytest.fixture
async def backend(tiny_qwen2: Path):
    b = EmbeddedBackend("tiny", EngineConfig(model=str(tiny_qwen2), dtype="float32", threads=1,
                                             max_model_len=256))
    await b.start()
    try:
        yield b
    finally:
        await b.aclose()


def _chat(content: str, **opts: object) -> GenerationRequest:
    return GenerationRequest(request_id=f"req-{content[:8]}-{len(opts)}", model="tiny", kind="chat",
                             options=SamplingOptions(**opts),  # type: ignore[arg-type]
                             messages=[{"role": "user", "content": content}])


async def test_is_a_backend_and_streams_a_chat(backend: EmbeddedBackend) -> None:
    assert isinstance(backend, Backend)
    assert (await backend.health()).ok
    assert backend.models()[0].max_model_len == 256
    deltas = [d async for d in backend.stream(_chat("hello there", max_tokens=12, temperature=0.0, ignore_eos=True))]
    assert deltas[-1].finish_reason == "length"
    assert deltas[-1].usage is not None
    assert deltas[-1].usage.completion_tokens == 12 == sum(len(d.token_ids) for d in deltas)
    text = "".join(d.text for d in deltas)
    assert text == backend.engine.tokenizer.decode([t for d in deltas for t in d.token_ids])


async def test_n_choices_are_independent_and_reproducible(backend: EmbeddedBackend) -> None:
    req = _chat("write a loop", max_tokens=10, temperature=1.0, seed=7, n=3, ignore_eos=True)
    deltas = [d async for d in backend.stream(req)]
    per_choice: dict[int, list[int]] = {}
    for d in deltas:
        per_choice.setdefault(d.index, []).extend(d.token_ids)
    assert sorted(per_choice) == [0, 1, 2]
    assert all(len(v) == 10 for v in per_choice.values())
    assert deltas[-1].usage is not None and deltas[-1].usage.completion_tokens == 30
    again = [d async for d in backend.stream(_chat("write a loop", max_tokens=10, temperature=1.0, seed=7, n=3,
                                                   ignore_eos=True))]
    again_choice: dict[int, list[int]] = {}
    for d in again:
        again_choice.setdefault(d.index, []).extend(d.token_ids)
    assert again_choice == per_choice


async def test_logprobs_are_reported(backend: EmbeddedBackend) -> None:
    deltas = [d async for d in backend.stream(_chat("x", max_tokens=4, temperature=0.0, logprobs=True,
                                                    top_logprobs=3, ignore_eos=True))]
    lps = [lp for d in deltas for lp in (d.logprobs or [])]
    assert len(lps) == 4
    for lp in lps:
        assert lp.logprob <= 0.0
        assert len(lp.top) == 3
        # greedy: the chosen token is the most likely one
        assert lp.logprob == pytest.approx(max(v for _, v in lp.top), abs=1e-5)


async def test_errors_before_first_delta(backend: EmbeddedBackend) -> None:
    with pytest.raises(ContextLengthExceededError) as exc:
        async for _ in backend.stream(_chat("word " * 400, max_tokens=4)):
            pass
    assert exc.value.param == "messages"
    with pytest.raises(ContextLengthExceededError) as exc2:
        async for _ in backend.stream(_chat("hi", max_tokens=1000)):
            pass
    assert exc2.value.param == "max_tokens"
    with pytest.raises(InvalidRequestError) as exc3:
        async for _ in backend.stream(_chat("hi", temperature=-3.0)):
            pass
    assert exc3.value.param == "temperature"


async def test_closing_the_stream_aborts_the_generation(backend: EmbeddedBackend) -> None:
    stream = backend.stream(_chat("count forever", max_tokens=200, temperature=0.0, ignore_eos=True))
    seen = 0
    async for _ in stream:
        seen += 1
        if seen == 2:
            break
    await stream.aclose()  # type: ignore[attr-defined]
    # A short follow-up request brings fresh engine stats back with its output.
    _ = [d async for d in backend.stream(_chat("ok", max_tokens=1, temperature=0.0))]
    load = backend.load()
    assert load.running == 0 and load.waiting == 0
    assert load.ttft_ms_ewma is not None
