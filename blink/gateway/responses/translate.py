"""A Responses request -> the pipeline's chat-shaped ``GenerationRequest``.

The Responses API is a different spelling of a chat completion with tools and an output format,
so it is translated into the chat body every backend already serves: function ``tools`` and
``tool_choice`` into chat's (forced calls then go through the grammar engine, #21), ``text.format``
into ``response_format`` (the same structured-output path), ``max_output_tokens`` into
``max_completion_tokens``. That chat body is validated by the chat schema and mapped by
``chat_request`` exactly as ``/v1/chat/completions`` is, so both doors share every check and the
exact cache, and an ``openai_http`` upstream receives it as a chat completion. Fields this server
cannot honour are refused here by name, before anything runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from blink.backends.base import GenerationRequest
from blink.gateway.chat.request_mapping import chat_request
from blink.gateway.http.request_parsing import validate
from blink.gateway.responses.items import chat_messages, new_id, normalize_input
from blink.protocol.chat import ChatCompletionRequest
from blink.protocol.errors import InvalidRequestError
from blink.protocol.responses import ResponsesRequest

# Fields that change the output or the service in ways Blink does not implement: any value other
# than the listed harmless ones is refused naming the field.
_REFUSED: dict[str, tuple[Any, ...]] = {
    "reasoning": (None,), "background": (None, False), "include": (None, []), "top_logprobs": (None, 0),
    "max_tool_calls": (None,), "conversation": (None,), "prompt": (None,), "context_management": (None, []),
    "prompt_cache_retention": (None, "in_memory"), "prompt_cache_options": (None,), "background_options": (None,),
    "moderation": (None,), "image": (None,), "access_programs": (None,), "truncation": (None, "disabled"),
    "service_tier": (None, "auto", "default"),
}
_WHY = {
    "reasoning": "this server's models have no reasoning mode",
    "background": "responses run in the foreground only",
    "include": "this server produces none of the optional output data",
    "truncation": "the conversation is never truncated; a too-long one is a 400",
}
_PASSED = frozenset(("temperature", "top_p", "user", "safety_identifier", "prompt_cache_key", "parallel_tool_calls",
                     "metadata",
                     # vLLM's sampling extras (protocol/responses.py), checked by the chat schema
                     "stop", "ignore_eos", "seed", "top_k", "repetition_penalty", "logit_bias", "skip_special_tokens",
                     "include_stop_str_in_output"))
# Fields the gateway answers itself rather than an upstream serving /v1/responses natively.
_NOT_PASSED_NATIVE = frozenset(("previous_response_id", "input", "model"))
_METADATA_KEYS = 16
_METADATA_KEY_CHARS = 64
_METADATA_VALUE_CHARS = 512


@dataclass(slots=True)
class Translated:
    """The request to run, and the items to store as this response's input."""

    request: GenerationRequest
    input_items: list[dict[str, Any]]


def refuse_unsupported(body: ResponsesRequest) -> None:
    # Only what the client sent can be refused (an unset field is None): usually nothing to look at.
    for name in body.model_fields_set & _REFUSED.keys():
        allowed, value = _REFUSED[name], getattr(body, name)
        if value not in allowed:
            why = _WHY.get(name, "this server does not implement it")
            raise InvalidRequestError(f"'{name}' is not supported by this server ({why}).", param=name,
                                      code="unsupported_parameter")
    _check_metadata(body.metadata)


def translate(body: ResponsesRequest, raw: dict[str, Any], model: str, history: list[dict[str, Any]],
              max_tokens_limit: int, timeout_s: float | None) -> Translated:
    """``raw``: the request as sent (``body`` is it validated); ``history``: the stored conversation
    ``previous_response_id`` replays (normalised items)."""
    refuse_unsupported(body)
    items = normalize_input(body.input)
    messages = ([{"role": "system", "content": body.instructions}] if body.instructions else [])
    messages += chat_messages(history + items)
    chat: dict[str, Any] = {"model": model, "messages": messages, "stream": bool(body.stream)}
    for name in body.model_fields_set & _PASSED:
        value = getattr(body, name)
        if value is not None:
            chat[name] = value
    if body.max_output_tokens is not None:
        chat["max_completion_tokens"] = body.max_output_tokens
    if body.tools:
        chat["tools"] = [_tool(i, t) for i, t in enumerate(body.tools)]
    if body.tool_choice is not None:
        chat["tool_choice"] = _tool_choice(body.tool_choice)
        if not body.tools and body.tool_choice not in ("none", "auto"):
            raise InvalidRequestError("'tool_choice' requires 'tools' to be specified.", param="tool_choice",
                                      code="invalid_value")
    response_format = _text_format(body.text)
    # ``text.format`` shapes the response's text; a forced call (required / a named function) makes
    # the whole output a call, so this turn has no text to shape and the grammar is the call's (an
    # agent keeps one format for every turn: its final answer's). Chat refuses the pair; here it is
    # the format of the turn that answers.
    forced = body.tool_choice not in (None, "none", "auto") and bool(body.tools)
    if response_format is not None and not forced:
        chat["response_format"] = response_format
    req = chat_request(validate(ChatCompletionRequest, chat), chat, model, max_tokens_limit, timeout_s)
    req.request_id = new_id("resp")
    # For an upstream that serves /v1/responses itself: the conversation inline (this gateway keeps
    # the state, so the upstream stores nothing and needs no previous_response_id).
    req.native_api = "responses"
    # Built from the validated request as sent (the schema forbids unknown fields), not by dumping
    # the model: a dump on every request was a large share of what Responses costs over chat.
    native = {k: v for k, v in raw.items() if v is not None and k not in _NOT_PASSED_NATIVE}
    req.native_body = {**native, "input": history + items, "store": False}
    return Translated(req, items)


def _tool(i: int, tool: Any) -> dict[str, Any]:
    path = f"tools[{i}]"
    kind = tool.get("type") if isinstance(tool, dict) else None
    if kind != "function":
        raise InvalidRequestError(
            f"'{path}.type' {kind!r} is not supported: this server runs function tools only (no built-in tools "
            "such as web_search, file_search, code_interpreter or computer_use).",
            param=f"{path}.type", code="unsupported_parameter")
    extra = sorted(set(tool) - {"type", "name", "description", "parameters", "strict"})
    if extra:
        raise InvalidRequestError(f"Unknown field '{path}.{extra[0]}'.", param=f"{path}.{extra[0]}",
                                  code="unknown_parameter")
    name = tool.get("name")
    if not isinstance(name, str) or not name:
        raise InvalidRequestError(f"'{path}.name' must be a non-empty string.", param=f"{path}.name",
                                  code="invalid_value")
    params = tool.get("parameters")
    if params is not None and not isinstance(params, dict):
        raise InvalidRequestError(f"'{path}.parameters' must be a JSON schema object.", param=f"{path}.parameters",
                                  code="invalid_type")
    fn = {k: tool[k] for k in ("name", "description", "parameters", "strict") if tool.get(k) is not None}
    return {"type": "function", "function": fn}


def _tool_choice(choice: str | dict[str, Any]) -> str | dict[str, Any]:
    if choice in ("none", "auto", "required"):
        return choice
    if isinstance(choice, dict) and choice.get("type") == "function" and isinstance(choice.get("name"), str):
        return {"type": "function", "function": {"name": choice["name"]}}
    raise InvalidRequestError("'tool_choice' must be 'none', 'auto', 'required' or {\"type\": \"function\", "
                              "\"name\": ...} (built-in tools and allowed_tools are not supported).",
                              param="tool_choice", code="unsupported_parameter")


def _text_format(text: dict[str, Any] | None) -> dict[str, Any] | None:
    if text is None:
        return None
    extra = sorted(set(text) - {"format", "verbosity"})
    if extra:
        raise InvalidRequestError(f"Unknown field 'text.{extra[0]}'.", param=f"text.{extra[0]}",
                                  code="unknown_parameter")
    if text.get("verbosity") is not None:
        raise InvalidRequestError("'text.verbosity' is not supported by this server's models.",
                                  param="text.verbosity", code="unsupported_parameter")
    fmt = text.get("format")
    if fmt is None:
        return None
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    allowed = {"text": {"type"}, "json_object": {"type"},
               "json_schema": {"type", "name", "schema", "strict", "description"}}
    if kind not in allowed:
        raise InvalidRequestError("'text.format.type' must be 'text', 'json_object' or 'json_schema'.",
                                  param="text.format.type", code="invalid_value")
    extra = sorted(set(fmt) - allowed[kind])
    if extra:
        raise InvalidRequestError(f"Unknown field 'text.format.{extra[0]}'.", param=f"text.format.{extra[0]}",
                                  code="unknown_parameter")
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "json_object"}
    if not isinstance(fmt.get("name"), str) or not fmt["name"]:
        raise InvalidRequestError("'text.format.name' must be a non-empty string.", param="text.format.name",
                                  code="invalid_value")
    if not isinstance(fmt.get("schema"), dict):
        raise InvalidRequestError("'text.format.schema' must be a JSON schema object.", param="text.format.schema",
                                  code="invalid_value")
    if fmt.get("strict") is not None and not isinstance(fmt["strict"], bool):
        raise InvalidRequestError("'text.format.strict' must be a boolean.", param="text.format.strict",
                                  code="invalid_type")
    return {"type": "json_schema", "json_schema": {k: fmt[k] for k in ("name", "schema", "strict", "description")
                                                   if fmt.get(k) is not None}}


def _check_metadata(metadata: dict[str, str] | None) -> None:
    """OpenAI's limits: 16 pairs, keys up to 64 characters, values up to 512."""
    if not metadata:
        return
    if len(metadata) > _METADATA_KEYS:
        raise InvalidRequestError(f"'metadata' may hold at most {_METADATA_KEYS} pairs.", param="metadata",
                                  code="invalid_value")
    for key, value in metadata.items():
        if len(key) > _METADATA_KEY_CHARS or len(value) > _METADATA_VALUE_CHARS:
            raise InvalidRequestError(f"'metadata' keys may have at most {_METADATA_KEY_CHARS} characters and values "
                                      f"{_METADATA_VALUE_CHARS}.", param="metadata", code="invalid_value")
