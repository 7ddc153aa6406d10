"""Prompt encoding for the embedded engine: off the event loop, and over-long prompts refused early."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from blink.backends.base import GenerationRequest, SamplingOptions
from blink.backends.embedded import EmbeddedBackend
from blink.backends.embedded_prompt import PromptEncoder
from blink.engine.config import EngineConfig
from blink.protocol.errors import ContextLengthExceededError

MIB = 1 << 20
BIG = ("def add(a, b):\n    return a + b  # sum\n" * (MIB // 38 + 1))[:MIB]


@pytest.fixture(scope="module")
async def backend(tiny_qwen2: Path):
    b = EmbeddedBackend("tiny", EngineConfig(model=str(tiny_qwen2), dtype="float32", threads=1,
                                             max_model_len=256))
    await b.start()
    try:
        yield b
    finally:
        await b.aclose()


def _chat(rid: str, content: str) -> GenerationRequest:
    return GenerationRequest(request_id=rid, model="tiny", kind="chat",
                             options=SamplingOptions(max_tokens=3, temperature=0.0, ignore_eos=True),
                             messages=[{"role": "user", "content": content}])


def _completion(rid: str, prompt: str) -> GenerationRequest:
    return GenerationRequest(request_id=rid, model="tiny", kind="completion",
                             options=SamplingOptions(max_tokens=3, temperature=0.0), prompt=prompt)


async def _drain(b: EmbeddedBackend, req: GenerationRequest) -> list[int]:
    return [t async for d in b.stream(req) for t in d.token_ids]


async def test_a_mebibyte_over_the_context_is_refused_by_its_size(backend: EmbeddedBackend) -> None:
    for req, param in ((_chat("big-chat", BIG), "messages"), (_completion("big-cmpl", BIG), "prompt")):
        with pytest.raises(ContextLengthExceededError) as exc:
            await _drain(backend, req)
        assert exc.value.status == 400 and exc.value.code == "context_length_exceeded"
        assert exc.value.param == param and "bytes" in exc.value.message  # refused before tokenising


async def test_a_prompt_near_the_limit_is_still_tokenised_and_judged_by_its_tokens(backend: EmbeddedBackend) -> None:
    tok = backend.engine.tokenizer
    assert tok is not None
    fits = "x" * 200  # far more bytes than the context has tokens is not enough to refuse
    assert len(tok.encode(fits, add_special_tokens=True)) < 250
    assert len(await _drain(backend, _completion("fits", fits))) == 3
    over = "def f(x): return x\n" * 40  # over 256 tokens, yet under bytes-per-token x context
    with pytest.raises(ContextLengthExceededError) as exc:
        await _drain(backend, _completion("over", over))
    assert "bytes" not in exc.value.message  # judged by the tokenizer, not the shortcut


async def test_tokenising_leaves_the_event_loop_free(backend: EmbeddedBackend) -> None:
    """Several mebibyte prompts that must really be tokenised (a context they fit): meanwhile the
    loop keeps running other work and a small chat on the same engine completes."""
    tok = backend.engine.tokenizer
    assert tok is not None
    encoder = PromptEncoder(tok, max_model_len=4 * MIB)
    big = [asyncio.create_task(encoder.encode(_chat(f"e{i}", BIG))) for i in range(3)]
    ticks = 0
    while not all(t.done() for t in big):
        ticks += 1
        await asyncio.sleep(0)
        if ticks == 1:
            assert len(await _drain(backend, _chat("small", "hello"))) == 3
    assert ticks > 1  # encoded on the loop, the first tick would find them all done
    assert all(len(t.result()) > 100_000 for t in big)


async def test_chat_inputs_reach_the_template(tiny_tokenizer_dir: Path) -> None:
    """tools and chat_template_kwargs are the template's variables, as HF apply_chat_template makes them."""
    from blink.backends.chat_messages import chat_inputs
    from blink.engine.tokenizer import Tokenizer

    tok = Tokenizer.from_pretrained(tiny_tokenizer_dir)
    tok.hf.chat_template = (
        "{% if greeting is defined %}[{{ greeting }}]{% endif %}"
        "{% for t in tools or [] %}<{{ t['function']['name'] }}>{% endfor %}"
        "{% for m in messages %}{{ m['role'] }}:{{ m['content'] }};{% endfor %}"
        "{% if add_generation_prompt %}assistant:{% endif %}"
    )
    enc = PromptEncoder(tok, 256)
    req = _chat("kw", "hi")
    tools = [{"type": "function", "function": {"name": "lookup"}}]
    inputs = chat_inputs([{"role": "user", "content": [{"type": "text", "text": "hi"}]}], tools,
                         {"greeting": "hello", "add_generation_prompt": False})
    text = tok.decode(await enc.encode(req, inputs), skip_special_tokens=False)
    assert text == "[hello]<lookup>user:hi;"
    assert tok.decode(await enc.encode(req), skip_special_tokens=False) == "user:hi;assistant:"
