"""``POST /v1/responses`` request body (OpenAI's Responses API).

Every field OpenAI's SDK can send is declared, so an unknown one is a 400 (``extra="forbid"``) and
a known one Blink cannot honour is refused by name in ``blink/gateway/responses/translate.py``,
never dropped. Items and tool entries stay plain dicts here: their many shapes are checked where
they are translated, with errors naming the exact path (``input[3].content[0].type``).
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from blink.protocol.common import LogitBias, Stop, StrictModel
from blink.request_limits import SAMPLING_LIMITS

_L = SAMPLING_LIMITS


class ResponsesStreamOptions(StrictModel):
    # Random padding against length side channels: output-neutral; Blink sends none.
    include_obfuscation: bool | None = None


class ResponsesRequest(StrictModel):
    model: str | None = None
    input: str | list[Any] | None = None
    instructions: str | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    text: dict[str, Any] | None = None
    max_output_tokens: int | None = Field(None, ge=1, le=_L.max_tokens)
    temperature: float | None = Field(None, ge=0.0, le=_L.max_temperature)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    metadata: dict[str, str] | None = None
    store: bool | None = True
    previous_response_id: str | None = None
    stream: bool | None = False
    stream_options: ResponsesStreamOptions | None = None
    # Output-neutral identifiers: accepted, echoed, passed to upstreams.
    user: str | None = None
    safety_identifier: str | None = None
    prompt_cache_key: str | None = None
    # vLLM's sampling extras on this endpoint (load generators such as guidellm send ``stop: null`` and
    # ``ignore_eos: true`` to fix the output length). Each is the chat field of the same name: translate.py
    # passes them on and the chat schema checks them.
    stop: Stop = None
    ignore_eos: bool | None = None
    seed: int | None = None
    top_k: int | None = None
    repetition_penalty: float | None = None
    logit_bias: dict[str, LogitBias] | None = None
    skip_special_tokens: bool | None = None
    include_stop_str_in_output: bool | None = None
    # Declared so that a value Blink cannot honour is refused by name (translate.py), not as unknown.
    truncation: str | None = None
    service_tier: str | None = None
    reasoning: dict[str, Any] | None = None
    background: bool | None = None
    include: list[str] | None = None
    top_logprobs: int | None = None
    max_tool_calls: int | None = None
    conversation: str | dict[str, Any] | None = None
    prompt: dict[str, Any] | None = None
    context_management: list[dict[str, Any]] | None = None
    prompt_cache_retention: str | None = None
    prompt_cache_options: dict[str, Any] | None = None
    background_options: dict[str, Any] | None = None
    moderation: dict[str, Any] | None = None
    image: dict[str, Any] | None = None
    access_programs: dict[str, Any] | None = None
