"""The embedded engine behind the Backend protocol: deltas, n choices, usage, errors, abort."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from blink.backends.base import Backend, GenerationRequest, SamplingOptions
from blink.backends.embedded import EmbeddedBackend
from blink.config.models import EmbeddedModel
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
    # The prompt's count comes first (a stream cut short is charged it), then never again.
    assert deltas[0].prompt_tokens == deltas[-1].usage.prompt_tokens > 0
    assert all(d.prompt_tokens is None for d in deltas[1:])
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


async def test_one_request_holds_at_most_its_share_of_the_engine(tiny_qwen2: Path) -> None:
    """Issue #20: n=128 took every sequence slot. With 4 slots and a 1/4 share, an n=4 request runs
    one choice at a time, so a request arriving behind it gets its first token while it still runs."""
    b = EmbeddedBackend("tiny", EngineConfig(model=str(tiny_qwen2), dtype="float32", threads=1, max_model_len=256,
                                             max_num_seqs=4, max_seqs_per_request_share=0.25))
    await b.start()
    try:
        events: list[tuple[str, int, bool]] = []  # (who, choice, finished)
        hog_started = asyncio.Event()

        async def hog() -> dict[int, list[int]]:
            tokens: dict[int, list[int]] = {}
            async for d in b.stream(_chat("hog", max_tokens=40, temperature=1.0, seed=3, n=4, ignore_eos=True)):
                tokens.setdefault(d.index, []).extend(d.token_ids)
                events.append(("hog", d.index, d.finish_reason is not None))
                hog_started.set()
            return tokens

        async def normal() -> None:
            await hog_started.wait()
            async for d in b.stream(_chat("normal", max_tokens=2, temperature=0.0, ignore_eos=True)):
                events.append(("normal", d.index, d.finish_reason is not None))

        hog_tokens, _ = await asyncio.gather(hog(), normal())
        first_normal = next(i for i, e in enumerate(events) if e[0] == "normal")
        hog_done = [i for i, e in enumerate(events) if e[0] == "hog" and e[2]]
        assert len(hog_done) == 4 and first_normal < hog_done[-1]  # served while the hog still ran
        # One choice at a time: no choice's tokens interleave with another's.
        order = [e[1] for e in events if e[0] == "hog"]
        assert order == sorted(order)
        assert sorted(hog_tokens) == [0, 1, 2, 3] and all(len(t) == 40 for t in hog_tokens.values())
        # The gate does not change what each choice generates (choice i samples with seed + i).
        again = [d async for d in b.stream(_chat("hog", max_tokens=40, temperature=1.0, seed=3, n=1, ignore_eos=True))]
        assert [t for d in again for t in d.token_ids] == hog_tokens[0]
    finally:
        await b.aclose()


async def test_an_n_request_alone_runs_its_choices_together(tiny_qwen2: Path) -> None:
    """A request's choices after the first are bulk work, held to the batch lane only while another
    request's urgent work waits: alone, its three choices run side by side even when the batch
    lane takes one sequence, and a chat sent meanwhile is served before they finish."""
    b = EmbeddedBackend("tiny", EngineConfig(model=str(tiny_qwen2), dtype="float32", threads=1, max_model_len=256,
                                             max_num_seqs=4, max_seqs_per_request_share=1.0, max_batch_seqs=1))
    await b.start()
    try:
        events: list[tuple[str, int, bool]] = []
        started = asyncio.Event()

        async def many() -> None:
            async for d in b.stream(_chat("many", max_tokens=60, temperature=1.0, seed=5, n=3, ignore_eos=True)):
                events.append(("many", d.index, d.finish_reason is not None))
                started.set()

        async def chat() -> None:
            await started.wait()
            async for d in b.stream(_chat("chat", max_tokens=2, temperature=0.0, ignore_eos=True)):
                events.append(("chat", d.index, d.finish_reason is not None))

        await asyncio.gather(many(), chat())
        many_events = [e for e in events if e[0] == "many"]
        first_done = next(i for i, e in enumerate(many_events) if e[2])
        assert {e[1] for e in many_events[:first_done]} == {0, 1, 2}  # interleaved, not one after another
        assert sum(1 for e in many_events if e[2]) == 3
        assert events.index(("chat", 0, True)) < len(events) - 1  # the chat ended before the last choice
    finally:
        await b.aclose()


def test_the_request_share_setting_is_declared_once() -> None:
    from pydantic import ValidationError

    from blink.request_limits import DEFAULT_MAX_SEQS_PER_REQUEST_SHARE

    assert EmbeddedModel().max_seqs_per_request_share == DEFAULT_MAX_SEQS_PER_REQUEST_SHARE
    assert EngineConfig(model="m").max_seqs_per_request_share == DEFAULT_MAX_SEQS_PER_REQUEST_SHARE
    cfg = _engine_config(EmbeddedModel(max_seqs_per_request_share=0.5))
    assert cfg.max_seqs_per_request_share == 0.5
    for bad in (0.0, 1.5):
        with pytest.raises(ValidationError):
            EmbeddedModel(max_seqs_per_request_share=bad)


@pytest.mark.parametrize(("raw", "param"), [({"suffix": "x"}, "suffix"), ({"best_of": 3}, "best_of"),
                                            ({"functions": [{"name": "f"}]}, "functions"),
                                            ({"modalities": ["text", "audio"]}, "modalities")])
async def test_sampling_fields_the_engine_cannot_honour_are_refused(backend: EmbeddedBackend, raw: dict,
                                                                   param: str) -> None:
    req = _chat("unsupported", max_tokens=2)
    req.extra = raw
    with pytest.raises(InvalidRequestError) as exc:
        [d async for d in backend.stream(req)]
    assert exc.value.param == param and exc.value.code == "unsupported_parameter"


def test_serving_with_no_flags_prints_and_runs_the_fast_defaults(tiny_qwen2: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from blink.backends.embedded import create_embedded_backend
    from blink.engine.async_engine import default_threads
    from blink.engine.cpu_features import read_cpu_features
    from blink.engine.fast_defaults import choose_serving_config

    backend = create_embedded_backend(EmbeddedModel(name="tiny", model=str(tiny_qwen2)))
    want = choose_serving_config("auto", "auto", 0, "cpu", read_cpu_features(), default_threads())
    assert capsys.readouterr().out == f"blink: tiny: {want.line()}\n"
    config = backend.engine.config
    assert (config.dtype, config.quantization, config.threads) == (want.dtype, want.quantization, want.threads)
    assert want.chosen == (("dtype",) if read_cpu_features().native_bf16 else ()) + ("quantization", "threads")


def test_explicit_settings_reach_the_engine_unchanged(tiny_qwen2: Path) -> None:

    ms = EmbeddedModel(name="tiny", model=str(tiny_qwen2), dtype="float32", quantization="none", threads=1)
    config = _engine_config(ms)
    assert (config.dtype, config.quantization, config.threads) == ("float32", "none", 1)


def _engine_config(ms: EmbeddedModel) -> EngineConfig:
    """What the embedded backend hands the engine for ``ms`` (its "auto" settings resolved)."""
    from blink.backends.embedded import serving_choice

    return serving_choice(ms).apply(ms)
