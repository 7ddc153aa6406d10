"""Self-information of a text's tokens, from a model served by this gateway.

The scorer is any backend that returns vLLM-style ``prompt_logprobs`` — in practice the embedded
small model: one prefill, one sampled token, no decode. It is reached through the registry like
any other model (the gateway never imports the engine).
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable

from blink.backends.base import Backend, GenerationRequest, SamplingOptions
from blink.gateway.compression.selection import ScoredToken, align

# Between the question and the context when the score is conditioned on the question.
_QUESTION_GAP = "\n\n"


class SelfInformationScorer:
    def __init__(self, resolve: Callable[[str], Backend], model: str) -> None:
        # Resolved per call: the scorer may be registered after the tier that uses it.
        self._resolve = resolve
        self.model = model

    async def score(self, text: str, question: str | None = None) -> list[ScoredToken]:
        """The tokens of ``text`` with −log p of each given the ones before it, and given
        ``question`` before them all when one is given (LongLLMLingua's question-aware score: a
        context token the question makes likely is one the answer may need). Conditioned tokens
        that do not split at the question's end are scored again without it."""
        if question:
            prefix = question + _QUESTION_GAP
            tokens = await self._prompt_logprobs(prefix + text)
            starts = align(prefix + text, tokens)
            if starts is not None and len(prefix) in starts:
                return tokens[starts.index(len(prefix)):]
        return await self._prompt_logprobs(text)

    async def _prompt_logprobs(self, text: str) -> list[ScoredToken]:
        req = GenerationRequest(
            request_id=f"cmpl-compress-{uuid.uuid4().hex[:12]}",
            model=self.model,
            kind="completion",
            options=SamplingOptions(max_tokens=1, temperature=0.0, prompt_logprobs=0),
            prompt=text,
        )
        backend = self._resolve(self.model)
        out: list[ScoredToken] = []
        async with contextlib.aclosing(backend.stream(req)) as deltas:  # type: ignore[type-var]
            async for delta in deltas:
                if delta.prompt_logprobs is not None and not out:
                    # The first entry is None (nothing predicts it): its text is unknown too.
                    out = [ScoredToken(e.token, -e.logprob) if e is not None else ScoredToken("", None)
                           for e in delta.prompt_logprobs]
        return out
