"""``POST /v1/messages`` and ``POST /v1/messages/count_tokens`` request bodies (Anthropic's Messages API).

The top level is strict, as Anthropic's API is: an unknown field is a 400 naming it. Content
blocks, tools and ``tool_choice`` stay plain JSON here; ``blink.gateway.messages.request`` reads
them with errors that name the block (``messages[2].content[0].type``), which a union of models
would report as an unreadable list of tag mismatches. Fields Anthropic defines but a text-only
open model cannot honour (``thinking``, server-side MCP, containers, context management) are
declared so that the translator can refuse them by name, never silently drop them.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from blink.protocol.common import StopString, StrictModel
from blink.request_limits import SAMPLING_LIMITS

_L = SAMPLING_LIMITS


class MessagesMetadata(StrictModel):
    # An opaque end-user id (abuse tracking): passed to upstreams as OpenAI's ``user``.
    user_id: str | None = Field(None, max_length=256)


class MessagesInput(StrictModel):
    """What ``count_tokens`` and ``create`` share: the conversation, its system prompt and tools."""

    model: str
    messages: list[dict[str, Any]] = Field(min_length=1)
    system: str | list[dict[str, Any]] | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: dict[str, Any] | None = None
    # Refused unless disabled: no extended thinking on the models this engine serves.
    thinking: dict[str, Any] | None = None
    # Anthropic-hosted features with no local equivalent: refused by name when present.
    mcp_servers: list[Any] | None = None
    context_management: dict[str, Any] | None = None
    container: Any = None
    output_format: dict[str, Any] | None = None
    output_config: dict[str, Any] | None = None
    # Prompt-caching markers cannot change an answer (the engine's prefix cache is automatic).
    cache_control: dict[str, Any] | None = None
    # One speed here: "standard" is what every request gets; "fast" is refused by validation.
    speed: Literal["standard"] | None = None


class MessagesRequest(MessagesInput):
    max_tokens: int = Field(ge=1, le=_L.max_tokens)
    stop_sequences: list[StopString] | None = Field(None, max_length=_L.max_stop_strings)
    stream: bool = False
    # Anthropic documents temperature in [0, 1].
    temperature: float | None = Field(None, ge=0.0, le=1.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    top_k: int | None = Field(None, ge=0, le=_L.max_top_k)
    metadata: MessagesMetadata | None = None
    # One tier here; both values are honoured by serving the request as it is.
    service_tier: Literal["auto", "standard_only"] | None = None


class CountTokensRequest(MessagesInput):
    """``count_tokens`` takes the input fields only (Anthropic refuses ``max_tokens`` there too)."""
