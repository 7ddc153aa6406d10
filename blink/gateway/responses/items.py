"""Responses ``input`` items, checked and given ids, and their chat-message form.

A Responses conversation is a list of items: messages (text parts), ``function_call`` and
``function_call_output``. The pipeline speaks chat, so items become chat messages: a
``function_call`` joins the assistant message before it as a ``tool_calls`` entry (parallel calls
are one assistant turn), a ``function_call_output`` is a ``tool`` message. Items are normalised
(string content -> ``input_text`` parts, an ``id`` and ``status`` on each) because that is what
``GET /v1/responses/{id}/input_items`` returns and what a later turn replays.
"""

from __future__ import annotations

import secrets
from typing import Any

from blink.protocol.errors import InvalidRequestError

# Items in one request's ``input``: far above any real conversation turn (agents send tens), low
# enough that a hostile list cannot make the translation and the stored row huge.
MAX_INPUT_ITEMS = 2048
_ROLES = ("user", "system", "developer", "assistant")
_INPUT_TEXT = ("input_text",)
_ASSISTANT_TEXT = ("output_text", "input_text")
_ITEM_FIELDS = {
    "message": {"type", "role", "content", "id", "status"},
    "function_call": {"type", "call_id", "name", "arguments", "id", "status"},
    "function_call_output": {"type", "call_id", "output", "id", "status"},
}


def new_id(prefix: str) -> str:
    """``prefix_`` + 48 hex digits from the OS's CSPRNG: ownership guards access, and the ids of
    stored responses and items are unguessable too (a Mersenne Twister's state, hence every later
    id, can be recovered from the ids it gave out)."""
    return f"{prefix}_{secrets.token_hex(24)}"


def normalize_input(value: str | list[Any] | None) -> list[dict[str, Any]]:
    """The request's ``input`` as checked items with ids; 400 naming the path on bad input."""
    if value is None:
        raise InvalidRequestError("'input' is required.", param="input", code="missing_required_parameter")
    if isinstance(value, str):
        return [_message("user", [{"type": "input_text", "text": value}])]
    if not value:
        raise InvalidRequestError("'input' must not be an empty list.", param="input", code="invalid_value")
    if len(value) > MAX_INPUT_ITEMS:
        raise InvalidRequestError(f"'input' may hold at most {MAX_INPUT_ITEMS} items; got {len(value)}.",
                                  param="input", code="invalid_value")
    return [_item(i, item) for i, item in enumerate(value)]


def _item(i: int, item: Any) -> dict[str, Any]:
    path = f"input[{i}]"
    if not isinstance(item, dict):
        raise InvalidRequestError(f"'{path}' must be an object.", param=path, code="invalid_type")
    kind = item.get("type", "message" if "role" in item else None)
    if kind not in _ITEM_FIELDS:
        raise InvalidRequestError(
            f"'{path}.type' {kind!r} is not supported: this server takes 'message', 'function_call' and "
            "'function_call_output' items (no reasoning, item references or built-in tool items).",
            param=f"{path}.type", code="unsupported_parameter")
    extra = sorted(set(item) - _ITEM_FIELDS[kind])
    if extra:
        raise InvalidRequestError(f"Unknown field '{path}.{extra[0]}'.", param=f"{path}.{extra[0]}",
                                  code="unknown_parameter")
    if kind == "message":
        role = item.get("role")
        if role not in _ROLES:
            raise InvalidRequestError(f"'{path}.role' must be one of {', '.join(_ROLES)}.", param=f"{path}.role",
                                      code="invalid_value")
        parts = _parts(path, item.get("content"), _ASSISTANT_TEXT if role == "assistant" else _INPUT_TEXT)
        return _message(role, parts, item.get("id"))
    call_id = _text(path, item, "call_id")
    if kind == "function_call":
        return {"id": _opt_id(path, item, "fc"), "type": "function_call", "call_id": call_id,
                "name": _text(path, item, "name"), "arguments": _text(path, item, "arguments", empty=True),
                "status": "completed"}
    output = item.get("output")
    if isinstance(output, list):  # text parts, as OpenAI allows: joined
        output = "".join(p["text"] for p in _parts(f"{path}.output", output, _INPUT_TEXT))
    if not isinstance(output, str):
        raise InvalidRequestError(f"'{path}.output' must be a string.", param=f"{path}.output", code="invalid_type")
    return {"id": _opt_id(path, item, "fco"), "type": "function_call_output", "call_id": call_id, "output": output,
            "status": "completed"}


def _message(role: str, parts: list[dict[str, Any]], item_id: Any = None) -> dict[str, Any]:
    if role == "assistant":
        parts = [{"type": "output_text", "text": p["text"], "annotations": []} for p in parts]
    return {"id": item_id if isinstance(item_id, str) and item_id else new_id("msg"), "type": "message",
            "role": role, "status": "completed", "content": parts}


def _parts(path: str, content: Any, allowed: tuple[str, ...]) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": allowed[0], "text": content}]
    if not isinstance(content, list):
        raise InvalidRequestError(f"'{path}.content' must be a string or a list of parts.",
                                  param=f"{path}.content", code="invalid_type")
    parts = []
    for j, part in enumerate(content):
        where = f"{path}.content[{j}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in allowed:
            raise InvalidRequestError(
                f"'{where}.type' {kind!r} is not supported: this server's models read text only "
                f"({', '.join(allowed)}).", param=f"{where}.type", code="unsupported_parameter")
        text = part.get("text")
        if not isinstance(text, str):
            raise InvalidRequestError(f"'{where}.text' must be a string.", param=f"{where}.text", code="invalid_type")
        parts.append({"type": kind, "text": text})
    return parts


def _text(path: str, item: dict[str, Any], key: str, empty: bool = False) -> str:
    value = item.get(key)
    if not isinstance(value, str) or (not value and not empty):
        raise InvalidRequestError(f"'{path}.{key}' must be a non-empty string.", param=f"{path}.{key}",
                                  code="invalid_value")
    return value


def _opt_id(path: str, item: dict[str, Any], prefix: str) -> str:
    value = item.get("id")
    return value if isinstance(value, str) and value else new_id(prefix)


def chat_messages(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Normalised items (input or output) -> chat messages, in order."""
    out: list[dict[str, Any]] = []
    for item in items:
        kind = item["type"]
        if kind == "message":
            text = "".join(p["text"] for p in item["content"])
            role = "system" if item["role"] == "developer" else item["role"]
            out.append({"role": role, "content": text})
        elif kind == "function_call":
            call = {"id": item["call_id"], "type": "function",
                    "function": {"name": item["name"], "arguments": item["arguments"]}}
            last = out[-1] if out else None
            if last is not None and last["role"] == "assistant":
                last.setdefault("tool_calls", []).append(call)
                last["content"] = last["content"] or None
            else:
                out.append({"role": "assistant", "content": None, "tool_calls": [call]})
        else:
            out.append({"role": "tool", "tool_call_id": item["call_id"], "content": item["output"]})
    return out
