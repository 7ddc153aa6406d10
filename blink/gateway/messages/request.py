"""Anthropic Messages request -> the pipeline's chat-shaped ``GenerationRequest``.

Every backend already speaks OpenAI chat (the embedded engine's templates and tool parsers,
``openai_http`` upstreams), so a Messages request is translated once, here, into the chat body
that request would have been: the system prompt becomes a system message, ``tool_use`` blocks
become ``tool_calls``, ``tool_result`` blocks become ``tool`` messages, Anthropic tools become
function tools and ``tool_choice`` ``any`` / ``tool`` become ``required`` / a named function, so
a forced call goes through the grammar like chat's. The translated body is split into the
request's typed fields and ``extra`` as a chat body is: the cache, routing and an upstream's
chat completions see a chat request, and the renderer (``response.py``) turns the deltas back into Anthropic's shape.

Anthropic's own rules are kept: roles alternate (consecutive turns of one role are merged, as
Anthropic does), ``tool_result`` blocks answer the ``tool_use`` blocks of the assistant turn just
before, and anything a text-only model cannot read (images, documents, thinking, server tools)
is a 400 naming the field rather than dropped.
"""

from __future__ import annotations

import time
from random import getrandbits
from typing import Any

import orjson

from blink.backends.base import GenerationRequest, SamplingOptions
from blink.backends.request_body import request_from_body
from blink.protocol.errors import InvalidRequestError
from blink.protocol.messages import MessagesInput, MessagesRequest

# Block types Anthropic defines that this engine cannot read: refused by name (never dropped).
_UNREADABLE = frozenset({"image", "document", "search_result", "thinking", "redacted_thinking", "container_upload",
                         "server_tool_use", "web_search_tool_result", "web_fetch_tool_result",
                         "code_execution_tool_result", "mcp_tool_use", "mcp_tool_result"})
# Keys a text block may carry besides its text (``cache_control`` cannot change an answer).
_TEXT_KEYS = frozenset({"type", "text", "cache_control", "citations"})
_TOOL_USE_KEYS = frozenset({"type", "id", "name", "input", "cache_control"})
_TOOL_RESULT_KEYS = frozenset({"type", "tool_use_id", "content", "is_error", "cache_control"})
_TOOL_KEYS = frozenset({"name", "description", "input_schema", "cache_control", "type"})


def messages_request(body: MessagesRequest, model: str, max_tokens_limit: int, timeout_s: float | None,
                     ) -> GenerationRequest:
    """The chat-shaped request; ``InvalidRequestError`` naming the field for anything refused."""
    if body.max_tokens > max_tokens_limit:
        raise InvalidRequestError(
            f"'max_tokens' is too large: {body.max_tokens}. This server allows at most {max_tokens_limit} "
            "output tokens.", param="max_tokens", code="invalid_value")
    chat = chat_body(body, model)
    chat["max_tokens"] = body.max_tokens
    options = SamplingOptions(
        max_tokens=body.max_tokens,
        temperature=1.0 if body.temperature is None else body.temperature,
        top_p=1.0 if body.top_p is None else body.top_p,
        top_k=-1 if not body.top_k else body.top_k,
        stop=list(body.stop_sequences or ()),
    )
    for name in ("temperature", "top_p", "top_k"):
        if getattr(body, name) is not None:
            chat[name] = getattr(body, name)
    if body.stop_sequences:
        chat["stop"] = list(body.stop_sequences)
    if body.metadata is not None and body.metadata.user_id is not None:
        chat["user"] = body.metadata.user_id
    return request_from_body(f"msg_{getrandbits(96):024x}", model, "chat", options, chat, messages=chat["messages"],
                             deadline=None if timeout_s is None else time.monotonic() + timeout_s)


def chat_body(body: MessagesInput, model: str) -> dict[str, Any]:
    """The OpenAI chat body for the conversation, system prompt and tools (``count_tokens`` too)."""
    _refuse_hosted_features(body)
    messages = _system(body.system) + _conversation(body.messages)
    chat: dict[str, Any] = {"model": model, "messages": messages}
    if body.tools:
        chat["tools"] = [_tool(i, t) for i, t in enumerate(body.tools)]
    names = [t["function"]["name"] for t in chat.get("tools", ())]
    if len(set(names)) != len(names):  # Anthropic refuses them too: a call could not say which tool it means
        twice = next(n for i, n in enumerate(names) if n in names[:i])
        raise InvalidRequestError(f"'tools': tool names must be unique; {twice[:64]!r} appears more than once.",
                                  param="tools", code="invalid_value")
    if body.tool_choice is not None:
        chat.update(_tool_choice(body.tool_choice, names))
    if messages[-1]["role"] == "assistant":  # Anthropic's prefill: the answer continues that turn
        if messages[-1].get("tool_calls"):
            raise InvalidRequestError(
                "The final assistant turn has tool_use blocks; send their tool_result blocks in a user turn "
                "to continue.", param=f"messages[{len(body.messages) - 1}].content", code="invalid_value")
        chat["continue_final_message"] = True
        chat["add_generation_prompt"] = False
    return chat


def _refuse_hosted_features(body: MessagesInput) -> None:
    thinking = body.thinking
    if thinking is not None and thinking.get("type") != "disabled":
        raise InvalidRequestError("'thinking' is not supported: the models this server runs have no extended "
                                  "thinking. Omit it, or send {\"type\": \"disabled\"}.", param="thinking",
                                  code="unsupported_parameter")
    for name in ("mcp_servers", "context_management", "container", "output_format", "output_config"):
        if getattr(body, name) is not None:
            raise InvalidRequestError(f"'{name}' is not supported by this server.", param=name,
                                      code="unsupported_parameter")


def _system(system: str | list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    if system is None:
        return []
    text = system if isinstance(system, str) else "\n".join(
        _text_block(f"system[{j}]", b) for j, b in enumerate(system))
    return [{"role": "system", "content": text}] if text else []


def _conversation(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    open_calls: set[str] = set()  # tool_use ids of the previous assistant turn, not yet answered
    prev_role: str | None = None
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(message, dict):
            raise InvalidRequestError(f"'{where}' must be an object.", param=where, code="invalid_type")
        extra = set(message) - {"role", "content"}
        if extra:
            name = sorted(extra)[0]
            raise InvalidRequestError(f"Unknown field '{where}.{name}'.", param=f"{where}.{name}",
                                      code="unrecognized_argument")
        role = message.get("role")
        if role not in ("user", "assistant"):
            raise InvalidRequestError(
                f"'{where}.role' must be 'user' or 'assistant', got {role!r} (the system prompt goes in "
                "the top-level 'system' field).", param=f"{where}.role", code="invalid_value")
        blocks = _blocks(where, message.get("content"))
        if role == "assistant":
            if open_calls:
                raise InvalidRequestError(
                    f"'{where}': tool_use ids were found without tool_result blocks immediately after: "
                    f"{', '.join(sorted(open_calls))}.", param=where, code="invalid_value")
            turn, open_calls = _assistant_turn(where, blocks)
        else:
            turn = _user_turn(where, blocks, open_calls if prev_role == "assistant" else set())
            open_calls = set()
        if prev_role == role and out:  # consecutive turns of one role: one turn (Anthropic merges them)
            _merge_into(out, turn)
        else:
            out.extend(turn)
        prev_role = role
    return out


def _blocks(where: str, content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list):
        raise InvalidRequestError(f"'{where}.content' must be a string or a list of content blocks.",
                                  param=f"{where}.content", code="invalid_type")
    for j, block in enumerate(content):
        at = f"{where}.content[{j}]"
        if not isinstance(block, dict):
            raise InvalidRequestError(f"'{at}' must be an object.", param=at, code="invalid_type")
        kind = block.get("type")
        if kind in _UNREADABLE:
            raise InvalidRequestError(f"Content blocks of type {kind!r} are not supported: this model reads text "
                                      "only.", param=f"{at}.type", code="unsupported_content_type")
        if kind not in ("text", "tool_use", "tool_result"):
            raise InvalidRequestError(f"'{at}.type' must be 'text', 'tool_use' or 'tool_result', got "
                                      f"{str(kind)[:40]!r}.", param=f"{at}.type", code="invalid_value")
    return content


def _assistant_turn(where: str, blocks: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], set[str]]:
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for j, block in enumerate(blocks):
        at = f"{where}.content[{j}]"
        if block["type"] == "text":
            texts.append(_text_block(at, block))
        elif block["type"] == "tool_use":
            calls.append(_tool_use(at, block))
        else:
            raise InvalidRequestError(f"'{at}': tool_result blocks belong in a user turn.", param=f"{at}.type",
                                      code="invalid_value")
    turn: dict[str, Any] = {"role": "assistant", "content": "".join(texts)}
    if calls:
        turn["tool_calls"] = calls
    return [turn], {c["id"] for c in calls}


def _user_turn(where: str, blocks: list[dict[str, Any]], open_calls: set[str]) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = []
    texts: list[str] = []
    for j, block in enumerate(blocks):
        at = f"{where}.content[{j}]"
        if block["type"] == "text":
            texts.append(_text_block(at, block))
        elif block["type"] == "tool_result":
            results.append(_tool_result(at, block, open_calls))
        else:
            raise InvalidRequestError(f"'{at}': tool_use blocks belong in an assistant turn.", param=f"{at}.type",
                                      code="invalid_value")
    missing = open_calls - {r["tool_call_id"] for r in results}
    if missing:
        raise InvalidRequestError(
            f"'{where}': tool_use ids were found without tool_result blocks immediately after: "
            f"{', '.join(sorted(missing))}. Each tool_use block must have a tool_result block in the next turn.",
            param=where, code="invalid_value")
    turn = list(results)
    if texts or not results:
        turn.append({"role": "user", "content": "\n".join(texts)})
    return turn


def _merge_into(out: list[dict[str, Any]], turn: list[dict[str, Any]]) -> None:
    last = out[-1]
    head = turn[0]
    if head["role"] == last["role"] and head["role"] in ("user", "assistant") and not last.get("tool_calls"):
        sep = "\n" if head["role"] == "user" else ""
        last["content"] = (last["content"] + sep + head["content"]) if last["content"] else head["content"]
        if head.get("tool_calls"):
            last["tool_calls"] = head["tool_calls"]
        turn = turn[1:]
    out.extend(turn)


def _text_block(at: str, block: Any) -> str:
    if not isinstance(block, dict) or block.get("type") != "text":
        raise InvalidRequestError(f"'{at}' must be a text block.", param=at, code="invalid_value")
    _no_extra_keys(at, block, _TEXT_KEYS)
    if block.get("citations"):
        raise InvalidRequestError("Citations in request text blocks are not supported.", param=f"{at}.citations",
                                  code="unsupported_parameter")
    text = block.get("text")
    if not isinstance(text, str):
        raise InvalidRequestError(f"'{at}.text' must be a string.", param=f"{at}.text", code="invalid_type")
    return text


def _tool_use(at: str, block: dict[str, Any]) -> dict[str, Any]:
    _no_extra_keys(at, block, _TOOL_USE_KEYS)
    for key in ("id", "name"):
        if not isinstance(block.get(key), str) or not block[key]:
            raise InvalidRequestError(f"'{at}.{key}' must be a non-empty string.", param=f"{at}.{key}",
                                      code="invalid_value")
    if not isinstance(block.get("input"), dict):
        raise InvalidRequestError(f"'{at}.input' must be an object.", param=f"{at}.input", code="invalid_type")
    try:
        arguments = orjson.dumps(block["input"]).decode()
    except orjson.JSONEncodeError:  # nested deeper than any tool's arguments are (orjson's limit: 255)
        raise InvalidRequestError(f"'{at}.input' is nested too deeply.", param=f"{at}.input",
                                  code="invalid_value") from None
    return {"id": block["id"], "type": "function", "function": {"name": block["name"], "arguments": arguments}}


def _tool_result(at: str, block: dict[str, Any], open_calls: set[str]) -> dict[str, Any]:
    _no_extra_keys(at, block, _TOOL_RESULT_KEYS)
    call_id = block.get("tool_use_id")
    if not isinstance(call_id, str) or call_id not in open_calls:
        raise InvalidRequestError(
            f"'{at}.tool_use_id': unexpected tool_use_id {str(call_id)[:64]!r} in a tool_result block; each "
            "tool_result must answer a tool_use block of the assistant turn just before.",
            param=f"{at}.tool_use_id", code="invalid_value")
    content = block.get("content", "")
    if isinstance(content, list):
        for k, part in enumerate(content):
            if isinstance(part, dict) and part.get("type") in _UNREADABLE:
                raise InvalidRequestError(f"Content blocks of type {part['type']!r} are not supported: this model "
                                          "reads text only.", param=f"{at}.content[{k}].type",
                                          code="unsupported_content_type")
        content = "\n".join(_text_block(f"{at}.content[{k}]", p) for k, p in enumerate(content))
    elif not isinstance(content, str):
        raise InvalidRequestError(f"'{at}.content' must be a string or a list of text blocks.",
                                  param=f"{at}.content", code="invalid_type")
    is_error = block.get("is_error", False)
    if not isinstance(is_error, bool):
        raise InvalidRequestError(f"'{at}.is_error' must be a boolean.", param=f"{at}.is_error", code="invalid_type")
    # A chat template has no error flag: the model is told in the text it reads.
    return {"role": "tool", "tool_call_id": call_id, "content": f"Error: {content}" if is_error else content}


def _tool(i: int, tool: Any) -> dict[str, Any]:
    at = f"tools[{i}]"
    if not isinstance(tool, dict):
        raise InvalidRequestError(f"'{at}' must be an object.", param=at, code="invalid_type")
    kind = tool.get("type", "custom")
    if kind not in ("custom", None):
        raise InvalidRequestError(f"'{at}.type' {str(kind)[:60]!r}: server tools are not supported; only custom "
                                  "tools (name, description, input_schema) are.", param=f"{at}.type",
                                  code="unsupported_parameter")
    _no_extra_keys(at, tool, _TOOL_KEYS)
    name = tool.get("name")
    if not isinstance(name, str) or not name:
        raise InvalidRequestError(f"'{at}.name' must be a non-empty string.", param=f"{at}.name",
                                  code="invalid_value")
    schema = tool.get("input_schema")
    if not isinstance(schema, dict) or schema.get("type") != "object":
        raise InvalidRequestError(f"'{at}.input_schema' must be a JSON schema with \"type\": \"object\".",
                                  param=f"{at}.input_schema", code="invalid_value")
    try:
        orjson.dumps(schema)
    except orjson.JSONEncodeError:  # the grammar compiler and templates recurse through it
        raise InvalidRequestError(f"'{at}.input_schema' is nested too deeply.", param=f"{at}.input_schema",
                                  code="invalid_value") from None
    fn: dict[str, Any] = {"name": name, "parameters": schema}
    if tool.get("description") is not None:
        fn["description"] = tool["description"]
    return {"type": "function", "function": fn}


def _tool_choice(choice: dict[str, Any], names: list[str]) -> dict[str, Any]:
    kind = choice.get("type")
    allowed = {"type", "disable_parallel_tool_use"} | ({"name"} if kind == "tool" else set())
    _no_extra_keys("tool_choice", choice, frozenset(allowed))
    parallel = choice.get("disable_parallel_tool_use", False)
    if not isinstance(parallel, bool):
        raise InvalidRequestError("'tool_choice.disable_parallel_tool_use' must be a boolean.",
                                  param="tool_choice.disable_parallel_tool_use", code="invalid_type")
    if kind in ("auto", "any", "tool") and not names:
        raise InvalidRequestError("'tool_choice' requires 'tools'.", param="tool_choice", code="invalid_value")
    out: dict[str, Any] = {"parallel_tool_calls": not parallel} if names else {}
    if kind == "auto":
        out["tool_choice"] = "auto"
    elif kind == "any":
        out["tool_choice"] = "required"
    elif kind == "none":
        out["tool_choice"] = "none"
    elif kind == "tool":
        name = choice.get("name")
        if name not in names:
            raise InvalidRequestError(f"'tool_choice.name' {str(name)[:64]!r} is not a tool in 'tools'.",
                                      param="tool_choice.name", code="invalid_value")
        out["tool_choice"] = {"type": "function", "function": {"name": name}}
    else:
        raise InvalidRequestError("'tool_choice.type' must be 'auto', 'any', 'tool' or 'none'.",
                                  param="tool_choice.type", code="invalid_value")
    return out


def _no_extra_keys(at: str, obj: dict[str, Any], allowed: frozenset[str]) -> None:
    extra = set(obj) - allowed
    if extra:
        name = sorted(extra)[0]
        raise InvalidRequestError(f"Unknown field '{at}.{name}'.", param=f"{at}.{name}", code="unrecognized_argument")
