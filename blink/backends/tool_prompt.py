"""Tools for a chat template that cannot render them: written into the conversation in Hermes format.

Many small instruct models' templates (SmolLM2's, Blink's default model) render only each message's
role and content. Given ``tools`` they drop them, and the calls of earlier assistant turns (content
null, ``tool_calls`` set) vanish from the prompt. Refusing such requests would shut out every agent
framework, which sends its tools on each turn; passing them to the template would silently answer as
if no tool existed. So, as LiteLLM and Ollama do for models without native function calling, Blink
writes them itself: the tool signatures join the system message, earlier calls become
``<tool_call>`` blocks in the assistant's text, and tool results become ``<tool_response>`` blocks
in a user turn. That is the Hermes / Qwen 2.5 format, the most widely trained one, and the model's
output is then read with the Hermes parser (``tool_parsers.HermesParser``).
"""

from __future__ import annotations

import functools
import json
import re
from typing import Any

# A template that names either renders tools or a call history itself: it is left alone.
_RENDERS_TOOLS = re.compile(r"\btools\b|\btool_calls\b")

_PREAMBLE = ("# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
             "You are provided with function signatures within <tools></tools> XML tags:\n<tools>")
_INSTRUCTIONS = ("</tools>\n\nFor each function call, return a json object with function name and arguments "
                 "within <tool_call></tool_call> XML tags:\n<tool_call>\n"
                 '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>')


@functools.lru_cache(maxsize=8)
def renders_tools(chat_template: str | None) -> bool:
    """Whether the template itself renders ``tools`` or assistant ``tool_calls``. Asked for every
    chat request of a model whose template never changes: scanned once per template, not per request."""
    return bool(chat_template) and _RENDERS_TOOLS.search(chat_template or "") is not None


def needs_inlining(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> bool:
    """Whether there is anything tool-shaped to write: tools, an earlier call, or a tool result."""
    return bool(tools) or any(m.get("tool_calls") or m.get("role") == "tool" for m in messages)


def inline_tools(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """``messages`` (template-ready: string content, decoded call arguments) with the tools and the
    call history written as text; runs of tool results become one user turn, as Hermes renders them."""
    out: list[dict[str, Any]] = []
    rest = messages
    if tools:
        block = "\n".join([_PREAMBLE, *(json.dumps(t, ensure_ascii=False) for t in tools), _INSTRUCTIONS])
        if messages and messages[0].get("role") in ("system", "developer"):
            first = messages[0]
            out.append({**first, "content": f"{first.get('content') or ''}\n\n{block}".lstrip("\n")})
            rest = messages[1:]
        else:
            out.append({"role": "system", "content": block})
    for message in rest:
        if message.get("role") == "tool":
            result = f"<tool_response>\n{message.get('content') or ''}\n</tool_response>"
            if out and out[-1].get("_tool_results"):
                out[-1]["content"] += "\n" + result
            else:
                out.append({"role": "user", "content": result, "_tool_results": True})
        elif message.get("tool_calls"):
            calls = "\n".join(_call_block(c) for c in message["tool_calls"])
            text = message.get("content") or ""
            plain = {k: v for k, v in message.items() if k != "tool_calls"}
            out.append({**plain, "content": f"{text}\n{calls}" if text else calls})
        else:
            out.append(message)
    return [{k: v for k, v in m.items() if k != "_tool_results"} for m in out]


def _call_block(call: dict[str, Any]) -> str:
    fn = call.get("function") or {}
    args = fn.get("arguments")
    body = {"name": fn.get("name"), "arguments": args if not isinstance(args, str) else _maybe_json(args)}
    return f"<tool_call>\n{json.dumps(body, ensure_ascii=False)}\n</tool_call>"


def _maybe_json(text: str) -> Any:
    """Arguments that arrived as text which is not a JSON object stay text (chat_messages keeps them)."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return text
