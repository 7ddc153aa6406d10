"""Prompt compression of an upstream tier's long context (blink/gateway/compression/)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class CompressionSettings(BaseModel):
    """Opt-in per ``openai_http`` model: set on the expensive tier, not on the cheap one."""

    model_config = ConfigDict(extra="forbid")

    # The served model that scores tokens (an embedded model's name in this server's models).
    scorer: str
    # Tokens before : after for each compressible span (2 = keep half).
    ratio: float = Field(2.0, gt=1.0, le=10.0)
    # Spans shorter than this many characters are sent as they are: too little to save for a
    # scoring call (about 4 characters a token in English).
    min_chars: int = Field(512, ge=1)
    # Score the context given the conversation's last user turn placed before it (LongLLMLingua's
    # question-aware score) instead of the context alone (LLMLingua's self-information): words
    # the question makes predictable stay. It costs the question's tokens in each scoring prefill.
    condition_on_question: bool = False
