"""Cache keys: what makes two requests "the same" for the exact and the semantic cache.

The exact key hashes the whole normalised request: tenant, model, kind, every message (or the
prompt) and every field that can change the output. The namespace hashes everything *but* the
text the semantic cache compares (the last user turn), so a semantic neighbour can only come
from a request with the same tenant, model, system prompt, parameters and conversation so far.
"""

from __future__ import annotations

import hashlib
from dataclasses import fields
from typing import Any

import orjson

from blink.backends.base import GenerationRequest, SamplingOptions

# Body fields that never change the generated text: they must not split the cache.
_IGNORED_FIELDS = frozenset(
    {"stream", "stream_options", "user", "metadata", "service_tier", "store", "cache", "prompt_cache_key",
     "safety_identifier"}
)
# The typed options are hashed in their normalised form (defaults filled in); ``extra`` as sent.
_OPTION_NAMES = tuple(f.name for f in fields(SamplingOptions))
# Requests that call tools or act as agents: their answers depend on state outside the text.
_TOOL_FIELDS = ("tools", "functions", "tool_choice", "function_call")


def _digest(obj: object) -> bytes:
    # Non-string keys: ``logit_bias`` maps token ids (ints) to values.
    return hashlib.blake2b(orjson.dumps(obj, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS),
                           digest_size=16).digest()


def normalise_text(text: str) -> str:
    """Whitespace-insensitive form of a message: runs of whitespace are one space, ends trimmed."""
    return " ".join(text.split())


def _normalise_message(m: dict[str, Any]) -> dict[str, Any]:
    out = dict(m)
    content = out.get("content")
    if isinstance(content, str):
        out["content"] = normalise_text(content)
    return out


def _params(req: GenerationRequest) -> dict[str, Any]:
    extra = {k: v for k, v in req.extra.items() if k not in _IGNORED_FIELDS}
    # A shallow dict: the same digest as ``dataclasses.asdict``, whose deep copy was most of the
    # cache stage's cost (benchmarks/RESULTS.md, "Figures behind the code's numbers", cache keys).
    o = req.options
    return {"options": {name: getattr(o, name) for name in _OPTION_NAMES}, "extra": extra}


def is_deterministic(req: GenerationRequest) -> bool:
    return req.options.temperature == 0 or req.options.seed is not None


def uses_tools(req: GenerationRequest) -> bool:
    if any(req.extra.get(f) for f in _TOOL_FIELDS):
        return True
    return any(m.get("role") in ("tool", "function") or m.get("tool_calls") for m in req.messages or ())


def exact_key(tenant: str, req: GenerationRequest) -> bytes:
    body: Any = [_normalise_message(m) for m in req.messages] if req.messages is not None else req.prompt
    if isinstance(body, str):
        body = normalise_text(body)
    return _digest(["exact", tenant, req.model, req.kind, body, _params(req)])


def split_query(req: GenerationRequest) -> tuple[list[dict[str, Any]], str]:
    """(context, query): the messages before the last user turn, and that turn's text."""
    if req.messages is None:
        return [], normalise_text(req.prompt) if isinstance(req.prompt, str) else ""
    msgs = [_normalise_message(m) for m in req.messages]
    for i in range(len(msgs) - 1, -1, -1):
        if msgs[i].get("role") == "user":
            content = msgs[i].get("content")
            text = content if isinstance(content, str) else ""
            return msgs[:i] + msgs[i + 1 :], text
    return msgs, ""


def namespace(tenant: str, req: GenerationRequest, context: list[dict[str, Any]]) -> str:
    """Tenant + model + kind + parameters + system prompt + conversation context, hashed."""
    return _digest(["ns", tenant, req.model, req.kind, _params(req), context]).hex()
