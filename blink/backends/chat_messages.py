"""OpenAI chat messages -> what a text-only model's chat template can render.

Chat templates are written for Hugging Face's conventions, not OpenAI's wire format: they
concatenate ``message['content']`` as a string, loop over ``tool_calls`` expecting the arguments
as a mapping (``arguments | tojson``), and fail on a list of content parts or a null content. So,
as vLLM does for text-only models: text parts are joined into one string (LangChain content
blocks, ``guidellm``'s requests), null content becomes "", and JSON-encoded tool-call arguments
are decoded. A part this engine cannot read (an image, audio, a file) is refused by name rather
than dropped, so a caller never gets an answer to a question it did not ask. The request's own
messages are never modified: an upstream or the cache may still read them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from blink.protocol.errors import InvalidRequestError

# Part types whose text is the content (OpenAI's "text"; "refusal" in assistant turns).
_TEXT_PARTS = {"text": "text", "refusal": "refusal"}
# Arguments of ``apply_chat_template`` itself: a client's ``chat_template_kwargs`` may not set them.
_RESERVED_KWARGS = frozenset({
    "conversation", "messages", "tools", "documents", "chat_template", "tokenize", "padding", "truncation",
    "max_length", "return_tensors", "return_dict", "return_assistant_tokens_mask", "tokenizer_kwargs",
    "continue_final_message",
})


@dataclass(frozen=True, slots=True)
class ChatInputs:
    """Everything the chat template receives for one request."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None
    template_kwargs: dict[str, Any] = field(default_factory=dict)


def chat_inputs(
    messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, template_kwargs: dict[str, Any] | None
) -> ChatInputs:
    """Validated, template-ready inputs; ``InvalidRequestError`` naming the offending field."""
    kwargs = dict(template_kwargs or {})
    for key in kwargs:
        if key in _RESERVED_KWARGS:
            raise InvalidRequestError(f"'chat_template_kwargs.{key}' cannot be set by a request.",
                                      param=f"chat_template_kwargs.{key}", code="invalid_value")
    if "add_generation_prompt" in kwargs and not isinstance(kwargs["add_generation_prompt"], bool):
        raise InvalidRequestError("'chat_template_kwargs.add_generation_prompt' must be a boolean.",
                                  param="chat_template_kwargs.add_generation_prompt", code="invalid_type")
    return ChatInputs([_message(i, m) for i, m in enumerate(messages)], tools or None, kwargs)


def _message(i: int, message: dict[str, Any]) -> dict[str, Any]:
    out = dict(message)
    content = message.get("content")
    if content is None:
        out["content"] = ""
    elif isinstance(content, list):
        out["content"] = "\n".join(_part_text(i, j, part) for j, part in enumerate(content))
    calls = message.get("tool_calls")
    if calls:
        out["tool_calls"] = [_tool_call(i, j, c) for j, c in enumerate(calls)]
    return out


def _part_text(i: int, j: int, part: Any) -> str:
    where = f"messages[{i}].content[{j}]"
    if not isinstance(part, dict):
        raise InvalidRequestError(f"'{where}' must be an object.", param=where, code="invalid_type")
    kind = part.get("type")
    key = _TEXT_PARTS.get(kind) if isinstance(kind, str) else None
    if key is None:
        raise InvalidRequestError(
            f"Content parts of type {kind!r} are not supported: this model reads text only.",
            param=f"{where}.type", code="unsupported_content_type")
    text = part.get(key)
    if not isinstance(text, str):
        raise InvalidRequestError(f"'{where}.{key}' must be a string.", param=f"{where}.{key}", code="invalid_type")
    return text


def _tool_call(i: int, j: int, call: Any) -> dict[str, Any]:
    where = f"messages[{i}].tool_calls[{j}]"
    fn = call.get("function") if isinstance(call, dict) else None
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
        raise InvalidRequestError(f"'{where}.function.name' must be a string.", param=f"{where}.function.name",
                                  code="invalid_value")
    args = fn.get("arguments")
    if isinstance(args, str):
        try:
            decoded = json.loads(args) if args.strip() else {}
        except (ValueError, RecursionError):  # RecursionError: nested past json's stack, as unreadable
            decoded = None
        # Templates render a mapping (``arguments | tojson``); text that is not an object stays text.
        if isinstance(decoded, dict):
            args = decoded
    elif args is None:
        args = {}
    return {**call, "function": {**fn, "arguments": args}}
