"""Per-attempt copies of a request: the cascade's logprob probe and mid-stream continuation."""

from __future__ import annotations

import copy

from blink.backends.base import GenerationRequest


def with_logprobs(req: GenerationRequest) -> GenerationRequest:
    """A copy asking for token logprobs (the cascade scores the first tokens with them)."""
    out = copy.copy(req)
    out.options = copy.copy(req.options)
    out.options.logprobs = True
    out.raw = dict(req.raw)
    if req.kind == "chat":
        out.raw["logprobs"] = True
    elif out.raw.get("logprobs") is None:
        out.raw["logprobs"] = 0
    return out


def continuation(req: GenerationRequest, sent: str, sent_tokens: int) -> GenerationRequest:
    """A copy that asks a fallback backend to go on from the text already sent to the client.

    Chat: the sent text becomes a trailing assistant message; completion: it extends the prompt.
    The completion budget shrinks by what was already sent."""
    out = copy.copy(req)
    out.options = copy.copy(req.options)
    out.raw = dict(req.raw)
    if req.options.max_tokens is not None:
        left = max(1, req.options.max_tokens - sent_tokens)
        out.options.max_tokens = left
        for key in ("max_tokens", "max_completion_tokens"):
            if key in out.raw:
                out.raw[key] = left
    if req.kind == "chat":
        out.messages = [*(req.messages or []), {"role": "assistant", "content": sent}]
        out.raw["messages"] = out.messages
    else:
        out.prompt = (req.prompt if isinstance(req.prompt, str) else "") + sent
        out.raw["prompt"] = out.prompt
    return out
