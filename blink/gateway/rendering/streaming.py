"""Deltas -> OpenAI SSE bytes, with no pydantic on the hot path.

The invariant part of every chunk (id, object, created, model) is encoded once per
request; each chunk then costs one ``orjson.dumps`` of its choice.
"""

from __future__ import annotations

from typing import Any

import orjson

from blink.backends.base import Delta, Usage
from blink.gateway.rendering.logprobs_format import chat_logprobs, completion_logprobs
from blink.protocol.errors import BlinkError

DONE = b"data: [DONE]\n\n"
KEEP_ALIVE = b": keep-alive\n\n"


def usage_dict(usage: Usage | None) -> dict[str, Any]:
    u = usage or Usage()
    return {
        "prompt_tokens": u.prompt_tokens,
        "completion_tokens": u.completion_tokens,
        "total_tokens": u.total_tokens,
        "prompt_tokens_details": {"cached_tokens": u.cached_tokens},
    }


def error_event(err: BlinkError) -> bytes:
    """An SSE event the openai client raises on: a stream that failed says so."""
    return b"data: " + orjson.dumps(err.body()) + b"\n\n"


class ChunkEncoder:
    """Encodes one request's deltas as ``chat.completion.chunk`` or ``text_completion`` events.

    ``continuous_usage`` (vLLM's ``stream_options.continuous_usage_stats``): every chunk carries
    the usage so far (prompt tokens of the choices started, completion tokens sent).
    ``return_token_ids`` (vLLM): each chunk carries its token ids, a choice's first its prompt's.
    """

    __slots__ = ("_chat", "_prefix", "_suffix", "_head", "_started", "_offsets", "_continuous", "_token_ids",
                 "_prompt_tokens", "_completion_tokens", "_usage", "_n")

    def __init__(self, kind: str, request_id: str, model: str, created: int, include_usage: bool,
                 continuous_usage: bool = False, return_token_ids: bool = False, n: int = 1) -> None:
        self._chat = kind == "chat"
        obj = "chat.completion.chunk" if self._chat else "text_completion"
        head = orjson.dumps({"id": request_id, "object": obj, "created": created, "model": model})[:-1]
        self._head = b"data: " + head
        self._prefix = self._head + b',"choices":['
        # With include_usage, OpenAI sends "usage": null on every chunk but the last.
        self._suffix = b'],"usage":null}\n\n' if include_usage else b"]}\n\n"
        self._started: set[int] = set()
        self._offsets: dict[int, int] = {}
        self._continuous = continuous_usage
        self._token_ids = return_token_ids
        self._prompt_tokens = 0
        self._completion_tokens = 0
        self._usage: Usage | None = None
        # Choices per prompt: a prompt's tokens count once, not once per choice.
        self._n = max(1, n)

    def encode(self, d: Delta) -> bytes | None:
        """The SSE event for ``d``, or None when it carries nothing to show (usage only)."""
        if self._continuous:
            self._count(d)
        # A token may have no text yet (it ends inside a UTF-8 character, or may begin a stop string):
        # its event is still sent when the client asked for token ids, or the ids would go missing.
        shows_ids = self._token_ids and bool(d.token_ids)
        if not (d.text or d.finish_reason or d.logprobs or d.tool_calls or shows_ids or d.index not in self._started):
            return None
        first = d.index not in self._started
        choice = self._chat_choice(d) if self._chat else self._completion_choice(d)
        prefix = self._prefix
        if self._token_ids:
            choice["token_ids"] = d.token_ids
            if first and d.prompt_token_ids is not None:
                if self._chat:  # vLLM: beside the choices in a chat chunk, on the choice otherwise
                    prefix = self._head + b',"prompt_token_ids":' + orjson.dumps(d.prompt_token_ids) + b',"choices":['
                else:
                    choice["prompt_token_ids"] = d.prompt_token_ids
        if not self._continuous:
            return prefix + orjson.dumps(choice) + self._suffix
        return prefix + orjson.dumps(choice) + b'],"usage":' + orjson.dumps(usage_dict(self._so_far())) + b"}\n\n"

    def usage(self, usage: Usage | None) -> bytes:
        return self._head + b',"choices":[],"usage":' + orjson.dumps(usage_dict(usage)) + b"}\n\n"

    def _count(self, d: Delta) -> None:
        if d.index not in self._started and d.prompt_token_ids is not None and d.index % self._n == 0:
            self._prompt_tokens += len(d.prompt_token_ids)
        self._completion_tokens += len(d.token_ids)
        if d.usage is not None:
            self._usage = d.usage

    def _so_far(self) -> Usage:
        if self._usage is not None:  # a backend's own figure (the final one, or an upstream's)
            return self._usage
        return Usage(prompt_tokens=self._prompt_tokens, completion_tokens=self._completion_tokens)

    def _chat_choice(self, d: Delta) -> dict[str, Any]:
        delta: dict[str, Any] = {}
        if d.index not in self._started:
            self._started.add(d.index)
            delta["role"] = "assistant"
            delta["content"] = d.text
        elif d.text:
            delta["content"] = d.text
        if d.tool_calls:
            delta["tool_calls"] = d.tool_calls
        logprobs = {"content": chat_logprobs(d.logprobs), "refusal": None} if d.logprobs else None
        return {"index": d.index, "delta": delta, "logprobs": logprobs, "finish_reason": d.finish_reason}

    def _completion_choice(self, d: Delta) -> dict[str, Any]:
        self._started.add(d.index)
        logprobs = None
        if d.logprobs:
            # Offsets advance by the tokens' strings, as in the whole answer (aggregate.py), not by the
            # text sent: a token that ends inside a character, or one held back while it may begin a
            # stop string, has no text of its own yet, and the two renderings would disagree.
            offset = self._offsets.get(d.index, 0)
            logprobs = completion_logprobs(d.logprobs, offset)
            self._offsets[d.index] = offset + sum(len(lp.token) for lp in d.logprobs)
        return {"index": d.index, "text": d.text, "logprobs": logprobs, "finish_reason": d.finish_reason}
