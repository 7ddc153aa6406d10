"""``POST /v1/chat/completions`` request body."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from blink.protocol.common import SamplingFields, null_is_default
from blink.request_limits import SAMPLING_LIMITS

Role = Literal["system", "developer", "user", "assistant", "tool", "function"]


class ChatMessage(BaseModel):
    """One message. Extra keys (``refusal``, ``audio``...) are tolerated and passed on."""

    model_config = ConfigDict(extra="allow", strict=True)

    role: Role
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None

    @model_validator(mode="after")
    def _content_required(self) -> ChatMessage:
        if self.content is None and self.role != "assistant":
            raise ValueError(f"a '{self.role}' message needs 'content'")
        return self


class ChatCompletionRequest(SamplingFields):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1, le=SAMPLING_LIMITS.max_tokens)
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=SAMPLING_LIMITS.max_logprobs)
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    response_format: dict[str, Any] | None = None
    functions: list[dict[str, Any]] | None = None
    function_call: str | dict[str, Any] | None = None
    reasoning_effort: str | None = None
    modalities: list[str] | None = None
    prediction: dict[str, Any] | None = None
    audio: dict[str, Any] | None = None
    web_search_options: dict[str, Any] | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    # OpenAI (reasoning models): answer length; refused by backends that cannot honour it.
    verbosity: Literal["low", "medium", "high"] | None = None
    # vLLM chat-template switches.
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    # vLLM: the answer starts with the last message's text when that is the assistant's own.
    echo: bool = False

    _logprobs_nullable = field_validator("logprobs", "echo", mode="before")(null_is_default)
