"""``POST /v1/completions`` request body (legacy text completions)."""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator

from blink.protocol.common import SamplingFields, null_is_default
from blink.request_limits import SAMPLING_LIMITS

Prompt = str | list[str] | list[int] | list[list[int]]


class CompletionRequest(SamplingFields):
    prompt: Prompt
    # OpenAI caps completions logprobs at 5; vLLM (and the shared table) allows 20.
    logprobs: int | None = Field(None, ge=0, le=SAMPLING_LIMITS.max_logprobs)
    # 0 only with echo: the prompt's text and logprobs alone (scoring a text; vLLM allows it).
    max_tokens: int | None = Field(None, ge=0, le=SAMPLING_LIMITS.max_tokens)
    echo: bool = False
    suffix: str | None = None
    best_of: int | None = Field(None, ge=1, le=SAMPLING_LIMITS.max_n)
    # vLLM accepts OpenAI's chat response_format on completions too.
    response_format: dict[str, Any] | None = None

    _echo_nullable = field_validator("echo", mode="before")(null_is_default)
