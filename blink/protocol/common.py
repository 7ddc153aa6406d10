"""Request fields shared by ``/v1/chat/completions`` and ``/v1/completions``.

Models are strict (no silent ``"10"`` -> ``10`` coercion) and forbid unknown fields, as
OpenAI does. Every range comes from ``blink.request_limits.SAMPLING_LIMITS``, the table the
engine validates against too, so nothing accepted here can fail (or crash) inside the engine.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from blink.request_limits import INT32_MAX, SAMPLING_LIMITS

_L = SAMPLING_LIMITS
StopString = Annotated[str, Field(min_length=1, max_length=_L.max_stop_chars)]
Stop = StopString | Annotated[list[StopString], Field(max_length=_L.max_stop_strings)] | None
TokenId = Annotated[int, Field(ge=0, le=INT32_MAX)]
LogitBias = Annotated[float, Field(ge=-_L.max_logit_bias, le=_L.max_logit_bias)]


# Priorities a client may ask for with ``x-blink-priority``, most urgent first (``normal`` is an
# alias of the default, ``interactive``, kept for existing clients). API keys are granted them as
# ``priority:<lane>`` scopes, so the header and the scopes read this one list.
PRIORITIES = ("voice", "interactive", "normal", "batch", "idle")


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


def null_is_default(cls: type[BaseModel], value: Any, info: ValidationInfo) -> Any:
    """For fields OpenAI types as nullable but Blink keeps a plain default (``n``, ``logprobs``, ``echo``):
    null means the field was left out. SDKs that serialise unset fields (and ``create(n=None)`` in the
    ``openai`` SDK) send it, and OpenAI accepts it."""
    if value is None and info.field_name is not None:
        return cls.model_fields[info.field_name].default
    return value


class StreamOptions(StrictModel):
    include_usage: bool = False
    # vLLM: usage (so far) on every chunk.
    continuous_usage_stats: bool = False
    # OpenAI: random padding in each event against length side channels; output-neutral, and
    # Blink sends none (the client must not rely on it).
    include_obfuscation: bool | None = None


class SamplingFields(StrictModel):
    """Knobs both endpoints accept: OpenAI's plus vLLM's widely used extras."""

    model: str | None = None
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    n: int = Field(1, ge=1, le=_L.max_n)
    max_tokens: int | None = Field(None, ge=1, le=_L.max_tokens)
    temperature: float | None = Field(None, ge=0.0, le=_L.max_temperature)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    seed: int | None = Field(None, ge=_L.min_seed, le=_L.max_seed)
    stop: Stop = None
    presence_penalty: float | None = Field(None, ge=-_L.max_penalty, le=_L.max_penalty)
    frequency_penalty: float | None = Field(None, ge=-_L.max_penalty, le=_L.max_penalty)
    logit_bias: dict[str, LogitBias] | None = None
    # Output-neutral identifiers (abuse tracking, cache routing): accepted, passed to upstreams.
    user: str | None = None
    prompt_cache_key: str | None = None
    safety_identifier: str | None = None
    # vLLM extras.
    top_k: int | None = Field(None, ge=-1, le=_L.max_top_k)
    min_p: float | None = Field(None, ge=0.0, le=1.0)
    repetition_penalty: float | None = Field(None, gt=0.0, le=_L.max_repetition_penalty)
    min_tokens: int = Field(0, ge=0, le=_L.max_tokens)
    ignore_eos: bool = False
    # Blink extra: false opts this request out of speculative decoding.
    speculative: bool = True
    stop_token_ids: Annotated[list[TokenId], Field(max_length=_L.max_stop_token_ids)] | None = None
    skip_special_tokens: bool = True
    # Only the default: the embedded detokeniser always joins special tokens without spaces.
    spaces_between_special_tokens: bool = True
    include_stop_str_in_output: bool = False
    # vLLM: log-probabilities of the prompt's tokens (non-streamed responses).
    prompt_logprobs: int | None = Field(None, ge=0, le=_L.max_logprobs)
    # vLLM: prompt and output token ids in the response.
    return_token_ids: bool | None = None
    # vLLM: only requests with the same salt share prefix-cache entries (within the tenant's own
    # scope, blink/gateway/pipeline.py); also part of the response cache's namespace.
    cache_salt: str | None = Field(None, min_length=1, max_length=256)
    # vLLM's structured outputs (current form, then the legacy guided_* fields it still accepts);
    # mapped to one StructuredOutput by blink/gateway/chat/structured_request.py, which checks them.
    structured_outputs: dict[str, Any] | None = None
    guided_json: dict[str, Any] | str | None = None
    guided_regex: str | None = None
    guided_choice: list[str] | None = None
    guided_grammar: str | None = None
    guided_decoding_backend: str | None = None
    # Passed through to upstreams untouched.
    metadata: dict[str, Any] | None = None
    service_tier: str | None = None
    store: bool | None = None

    _n_nullable = field_validator("n", mode="before")(null_is_default)
