"""Request fields shared by ``/v1/chat/completions`` and ``/v1/completions``.

Models are strict (no silent ``"10"`` -> ``10`` coercion) and forbid unknown fields, as
OpenAI does. Ranges follow OpenAI's documented limits; the vLLM extras follow vLLM's.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

# OpenAI allows at most 4 stop sequences; vLLM allows more. 16 keeps matching cheap.
MAX_STOP_SEQUENCES = 16

Stop = str | Annotated[list[str], Field(max_length=MAX_STOP_SEQUENCES)] | None


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class StreamOptions(StrictModel):
    include_usage: bool = False
    continuous_usage_stats: bool = False


class SamplingFields(StrictModel):
    """Knobs both endpoints accept: OpenAI's plus vLLM's widely used extras."""

    model: str | None = None
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    n: int = Field(1, ge=1, le=128)
    max_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    seed: int | None = None
    stop: Stop = None
    presence_penalty: float | None = Field(None, ge=-2.0, le=2.0)
    frequency_penalty: float | None = Field(None, ge=-2.0, le=2.0)
    logit_bias: dict[str, float] | None = None
    user: str | None = None
    # vLLM extras.
    top_k: int | None = Field(None, ge=-1)
    min_p: float | None = Field(None, ge=0.0, le=1.0)
    repetition_penalty: float | None = Field(None, gt=0.0, le=2.0)
    min_tokens: int = Field(0, ge=0)
    ignore_eos: bool = False
    # Blink extra: false opts this request out of speculative decoding.
    speculative: bool = True
    stop_token_ids: list[int] | None = None
    skip_special_tokens: bool = True
    include_stop_str_in_output: bool = False
    # Passed through to upstreams untouched.
    metadata: dict[str, Any] | None = None
    service_tier: str | None = None
    store: bool | None = None
