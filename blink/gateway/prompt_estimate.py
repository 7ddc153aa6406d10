"""A prompt's token count as the gateway can tell without the model's tokenizer.

Charged only for a response that ended before its backend counted the prompt: a client that hangs
up before the first token (the backend already read and prefilled the prompt), or an upstream that
reports usage only at its end. Without it a long prompt cut short cost nothing against token
limits and spend. It is an estimate from the text, deliberately not a tokenizer call: the gateway
serves any upstream's model and must not tokenise on every request's path for the rare
abandoned one.
"""

from __future__ import annotations

import json
import math
from typing import Any

from blink.backends.base import GenerationRequest

# OpenAI's rule of thumb for English text in BPE vocabularies: about 4 characters per token.
_CHARS_PER_TOKEN = 4
# A chat template's markers around each message (ChatML: <|im_start|>role\n ... <|im_end|>\n).
_TOKENS_PER_MESSAGE = 4


def estimate_prompt_tokens(req: GenerationRequest) -> int:
    """Every prompt's tokens: token-id prompts exactly, text by its length, messages with their
    template markers, tool definitions by their JSON."""
    tokens = 0
    chars = 0
    prompts = req.prompts if req.prompts else ([req.prompt] if req.prompt is not None else [])
    for p in prompts:
        if isinstance(p, str):
            chars += len(p)
        else:
            tokens += len(p)
    for m in req.messages or ():
        tokens += _TOKENS_PER_MESSAGE
        chars += _message_chars(m)
    tools = req.extra.get("tools")
    if tools:
        chars += len(json.dumps(tools, ensure_ascii=False))
    return tokens + math.ceil(chars / _CHARS_PER_TOKEN)


def _message_chars(message: dict[str, Any]) -> int:
    content = message.get("content")
    chars = 0
    if isinstance(content, str):
        chars += len(content)
    elif isinstance(content, list):
        chars += sum(len(p["text"]) for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    for call in message.get("tool_calls") or ():
        fn = call.get("function") if isinstance(call, dict) else None
        if isinstance(fn, dict):
            chars += len(str(fn.get("name") or "")) + len(str(fn.get("arguments") or ""))
    return chars
