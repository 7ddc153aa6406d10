"""``TokenLogprob`` lists -> the OpenAI logprobs shapes (chat and legacy completions), and
``PromptLogprob`` lists -> vLLM's ``prompt_logprobs``."""

from __future__ import annotations

from typing import Any

from blink.backends.base import PromptLogprob, TokenLogprob


def chat_logprobs(items: list[TokenLogprob]) -> list[dict[str, Any]]:
    return [
        {
            "token": lp.token,
            "logprob": lp.logprob,
            "bytes": lp.bytes if lp.bytes is not None else list(lp.token.encode()),
            "top_logprobs": [
                {"token": t, "logprob": v, "bytes": list(t.encode()) if lp.top_bytes is None else lp.top_bytes[i]}
                for i, (t, v) in enumerate(lp.top)
            ],
        }
        for lp in items
    ]


def completion_logprobs(items: list[TokenLogprob], offset: int) -> dict[str, Any]:
    """Legacy shape; ``offset`` is the text length before these tokens (for ``text_offset``).

    ``top_logprobs`` always holds the chosen token too (OpenAI and vLLM do, so ``logprobs=0``
    still names it); an echoed prompt's first token has null there, as it has no logprob.
    """
    offsets = []
    tops: list[dict[str, float] | None] = []
    for lp in items:
        offsets.append(offset)
        offset += len(lp.token)
        if lp.logprob is None:
            tops.append(None)
            continue
        top = dict(lp.top)
        top.setdefault(lp.token, lp.logprob)
        tops.append(top)
    return {
        "tokens": [lp.token for lp in items],
        "token_logprobs": [lp.logprob for lp in items],
        "top_logprobs": tops,
        "text_offset": offsets,
    }


def prompt_logprobs(items: list[PromptLogprob | None]) -> list[dict[str, dict[str, Any]] | None]:
    """vLLM's shape: per prompt position, token id (a string) -> logprob, rank, decoded token;
    the position's own token and its most likely tokens (ranks 1..k)."""
    out: list[dict[str, dict[str, Any]] | None] = []
    for p in items:
        if p is None:
            out.append(None)
            continue
        entry = {str(p.token_id): {"logprob": p.logprob, "rank": p.rank, "decoded_token": p.token}}
        for rank, (token_id, text, value) in enumerate(p.top, start=1):
            entry.setdefault(str(token_id), {"logprob": value, "rank": rank, "decoded_token": text})
        out.append(entry)
    return out
