"""``TokenLogprob`` lists -> the two OpenAI logprobs shapes (chat and legacy completions)."""

from __future__ import annotations

from typing import Any

from blink.backends.base import TokenLogprob


def chat_logprobs(items: list[TokenLogprob]) -> list[dict[str, Any]]:
    return [
        {
            "token": lp.token,
            "logprob": lp.logprob,
            "bytes": lp.bytes if lp.bytes is not None else list(lp.token.encode()),
            "top_logprobs": [{"token": t, "logprob": v, "bytes": list(t.encode())} for t, v in lp.top],
        }
        for lp in items
    ]


def completion_logprobs(items: list[TokenLogprob], offset: int) -> dict[str, Any]:
    """Legacy shape; ``offset`` is the text length before these tokens (for ``text_offset``)."""
    offsets = []
    for lp in items:
        offsets.append(offset)
        offset += len(lp.token)
    return {
        "tokens": [lp.token for lp in items],
        "token_logprobs": [lp.logprob for lp in items],
        "top_logprobs": [dict(lp.top) for lp in items],
        "text_offset": offsets,
    }
