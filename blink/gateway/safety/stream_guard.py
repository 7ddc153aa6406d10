"""Blocking mode: the input is checked before the model runs, the output sentence by sentence.

Deltas of a choice are held until its text reaches a sentence end, then the sentence (with the
rest of the current one) is checked and the held deltas released. A flagged sentence is never
sent: the choice ends with ``finish_reason: "content_filter"`` and, once every choice ended, the
generation is closed (which aborts it upstream). PII in a sentence is redacted before release.

A blocked input is a 400 with ``code: content_filter`` (Azure OpenAI's convention)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from functools import partial

from blink.backends.base import Delta, GenerationRequest, StreamFn
from blink.gateway.safety.checks import SafetyPipeline, input_text
from blink.obs.redact import redact
from blink.protocol.errors import InvalidRequestError


class ContentFilteredError(InvalidRequestError):
    def __init__(self, categories: set[str], param: str = "messages") -> None:
        names = ", ".join(sorted(categories)) or "policy"
        super().__init__(f"The request was blocked by the content filter ({names}).", param=param,
                         code="content_filter")  # fmt: skip


# End of a sentence: terminal punctuation (plus closing quotes/brackets) before a space, or a newline.
_SENTENCE_END = re.compile(r"[.!?;:][\"')\]]*(?=\s)|\n")
CONTENT_FILTER = "content_filter"


@dataclass(slots=True)
class _Choice:
    held: list[Delta] = field(default_factory=list)
    held_text: str = ""
    sentence: str = ""  # the text since the last released sentence end (the check's window)
    ended: bool = False


class StreamGuard:
    """Stream middleware (``StreamMiddleware``) for blocking-mode requests: wraps the stream it is
    given; it has no lifecycle of its own."""

    def __init__(self, pipeline: SafetyPipeline, on_flag: Callable[[set[str]], None]) -> None:
        self._pipeline = pipeline
        self._on_flag = on_flag

    def __call__(self, inner: StreamFn) -> StreamFn:
        return partial(self._stream, inner)

    async def _stream(self, inner: StreamFn, req: GenerationRequest) -> AsyncIterator[Delta]:
        verdict = await self._pipeline.check(input_text(req))
        if verdict.flagged:
            self._on_flag(verdict.categories)
            # The field that carried the input: a completion's is its prompt.
            raise ContentFilteredError(verdict.categories, "messages" if req.kind == "chat" else "prompt")
        choices: dict[int, _Choice] = {}
        it = inner(req)
        try:
            async for delta in it:
                ch = choices.setdefault(delta.index, _Choice())
                if ch.ended:
                    continue
                ch.held.append(delta)
                ch.held_text += delta.text
                ch.sentence += delta.text
                last_end = _last_boundary(ch.sentence)
                if delta.finish_reason is None and delta.usage is None and last_end < 0:
                    continue
                async for out in self._release(ch, delta.index, last_end, final=delta.finish_reason is not None):
                    yield out
                if ch.ended and len(choices) >= req.num_choices and all(c.ended for c in choices.values()):
                    return  # every choice was cut: stop the generation
            for index, ch in choices.items():  # a stream that ended without a finish reason
                if ch.held and not ch.ended:
                    async for out in self._release(ch, index, -1, final=True):
                        yield out
        finally:
            await it.aclose()  # type: ignore[attr-defined]

    async def _release(self, ch: _Choice, index: int, last_end: int, final: bool) -> AsyncIterator[Delta]:
        verdict = await self._pipeline.check(ch.sentence)
        if verdict.flagged:
            ch.ended = True
            self._on_flag(verdict.categories)
            yield Delta(index=index, finish_reason=CONTENT_FILTER)
            return
        held, ch.held, text = ch.held, [], ch.held_text
        ch.held_text = ""
        ch.sentence = "" if final else ch.sentence[last_end:]
        if verdict.redacted is not None:
            # One delta with the redacted text (token ids and logprobs no longer match it).
            tail = held[-1]
            yield Delta(index=index, text=redact(text), finish_reason=tail.finish_reason, usage=tail.usage,
                        prompt_tokens=next((d.prompt_tokens for d in held if d.prompt_tokens is not None), None))
            return
        for d in held:
            yield d


def _last_boundary(text: str) -> int:
    """Index just past the last sentence end in ``text``, or -1."""
    last = -1
    for m in _SENTENCE_END.finditer(text):
        last = m.end()
    return last
