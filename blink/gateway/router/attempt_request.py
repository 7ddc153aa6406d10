"""Per-attempt copies of a request: the cascade's logprob probe and mid-stream continuation.

Only the typed fields are edited: every field they carry lives there alone (``extra`` holds the
others), and a server that forwards a body builds it from them (``request_body.openai_body``), so
one edit reaches every kind of server.
"""

from __future__ import annotations

import copy

from blink.backends.base import GenerationRequest


def with_logprobs(req: GenerationRequest) -> GenerationRequest:
    """A copy asking for token logprobs (the cascade scores the first tokens with them)."""
    out = copy.copy(req)
    out.options = copy.copy(req.options)
    out.options.logprobs = True
    return out


def continuation(req: GenerationRequest, sent: str, sent_tokens: int) -> GenerationRequest:
    """A copy that asks a fallback backend to go on from the text already sent to the client.

    Chat: the sent text becomes a trailing assistant message; completion: it extends the prompt.
    The completion budget shrinks by what was already sent."""
    out = copy.copy(req)
    out.options = copy.copy(req.options)
    if req.options.max_tokens is not None:
        out.options.max_tokens = max(1, req.options.max_tokens - sent_tokens)
    if req.kind == "chat":
        out.messages = [*(req.messages or []), {"role": "assistant", "content": sent}]
    else:
        out.prompt = (req.prompt if isinstance(req.prompt, str) else "") + sent
    return out
