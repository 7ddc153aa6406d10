"""``POST /v1/completions`` request body (legacy text completions)."""

from __future__ import annotations

from pydantic import Field

from blink.protocol.common import SamplingFields

Prompt = str | list[str] | list[int] | list[list[int]]


class CompletionRequest(SamplingFields):
    prompt: Prompt
    # OpenAI caps completions logprobs at 5; vLLM allows 20.
    logprobs: int | None = Field(None, ge=0, le=20)
    echo: bool = False
    suffix: str | None = None
    best_of: int | None = Field(None, ge=1, le=128)
