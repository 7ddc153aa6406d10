"""Chat deltas -> the Responses API's output items, response object and SSE events.

One ``ResponseRenderer`` per response follows the deltas: text opens a ``message`` item (with one
``output_text`` part), each tool call a ``function_call`` item; an item is closed (its ``.done``
events) when the next one opens or the answer ends. The streamed events are the documented
sequence, each with its ``sequence_number``: ``response.created``, ``response.in_progress``, then per
item ``output_item.added`` -> (``content_part.added`` -> ``output_text.delta``... ->
``output_text.done`` -> ``content_part.done`` | ``function_call_arguments.delta``... ->
``function_call_arguments.done``) -> ``output_item.done``, and last ``response.completed`` (or
``response.incomplete``); a failure after the first event ends with ``error`` + ``response.failed``.
The non-streamed body is the same object ``response.completed`` carries.

Events come out SSE-encoded (bytes), with no pydantic and no per-event dict copies on the way:
the text delta, one per token, is spliced from bytes prepared when its item opens (as
``streaming.ChunkEncoder`` does for chat), and the two opening events share one encoding of the
response snapshot. That per-token work is what a Responses stream pays on top of a chat stream.
"""

from __future__ import annotations

import time
from typing import Any

import orjson

from blink.backends.base import Delta, Usage
from blink.gateway.responses.items import new_id
from blink.protocol.errors import BlinkError
from blink.protocol.responses import ResponsesRequest

_TEXT_DELTA = b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta","sequence_number":'
# Chat finish reasons that end a response early, as Responses' ``incomplete_details.reason``.
_INCOMPLETE = {"length": "max_output_tokens", "content_filter": "content_filter"}


def usage_object(usage: Usage | None) -> dict[str, Any]:
    u = usage or Usage()
    # ``cache_write_tokens`` counts OpenAI's billed writes of explicit prompt caching; Blink's prefix
    # cache is implicit (nothing is billed or reported as a write), so it is 0.
    return {"input_tokens": u.prompt_tokens,
            "input_tokens_details": {"cached_tokens": u.cached_tokens, "cache_write_tokens": 0},
            "output_tokens": u.completion_tokens, "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": u.total_tokens}


class ResponseRenderer:
    def __init__(self, response_id: str, model: str, body: ResponsesRequest, tools: list[dict[str, Any]],
                 tool_choice: Any) -> None:
        self.id = response_id
        self._model = model
        self._body = body
        self._tools = tools
        self._tool_choice = tool_choice
        self.created_at = int(time.time())
        self.output: list[dict[str, Any]] = []
        self.usage: Usage | None = None
        self.status = "in_progress"
        self._incomplete: str | None = None
        self._error: dict[str, Any] | None = None
        self._seq = 0
        self._message: dict[str, Any] | None = None  # the open message item
        self._text: list[str] = []  # the open message's text so far, joined when it closes
        self._text_mid = b""  # the bytes of its text delta event between sequence number and delta
        # (first sequence number, message item, its opening events) rendered ahead: prepare_message
        self._prepared: tuple[int, dict[str, Any], list[bytes]] | None = None
        self._calls: dict[int, dict[str, Any]] = {}  # chat tool-call index -> its function_call item
        self._open_call: dict[str, Any] | None = None
        # False once the store declined the response (over its budget): the object says so.
        self.stored = body.store is not False

    # -- the response object ------------------------------------------------------------------

    def response(self) -> dict[str, Any]:
        b = self._body
        done = self.status not in ("in_progress",)
        return {
            "id": self.id, "object": "response", "created_at": self.created_at, "status": self.status,
            "completed_at": int(time.time()) if self.status == "completed" else None,
            "error": self._error,
            "incomplete_details": {"reason": self._incomplete} if self._incomplete else None,
            "instructions": b.instructions, "max_output_tokens": b.max_output_tokens, "model": self._model,
            "output": self.output if done else [], "parallel_tool_calls": b.parallel_tool_calls is not False,
            "previous_response_id": b.previous_response_id, "reasoning": None, "store": self.stored,
            "temperature": 1.0 if b.temperature is None else b.temperature,
            "text": b.text or {"format": {"type": "text"}},
            "tool_choice": self._tool_choice, "tools": self._tools,
            "top_p": 1.0 if b.top_p is None else b.top_p, "truncation": "disabled",
            "usage": usage_object(self.usage) if done and self._error is None else None,
            "user": b.user, "safety_identifier": b.safety_identifier, "prompt_cache_key": b.prompt_cache_key,
            "metadata": b.metadata or {}, "background": False, "service_tier": "default",
        }

    @property
    def began(self) -> bool:
        """Whether any event was produced (``response.created`` is always the first)."""
        return self._seq > 0

    # -- following the deltas -----------------------------------------------------------------

    def start(self) -> list[bytes]:
        snapshot = orjson.dumps(self.response())
        return [self._wrap("response.created", b"response", snapshot),
                self._wrap("response.in_progress", b"response", snapshot)]

    def feed(self, d: Delta) -> list[bytes]:
        events: list[bytes] = []
        if d.text:
            if self._message is None:
                events += self._close_call()
                events += self._open_message()
            self._text.append(d.text)
            events.append(_TEXT_DELTA + str(self._seq).encode() + self._text_mid + orjson.dumps(d.text)
                          + b',"logprobs":[]}\n\n')
            self._seq += 1
        for frag in d.tool_calls or ():
            events += self._call_fragment(frag)
        if d.finish_reason is not None:
            self._incomplete = self._incomplete or _INCOMPLETE.get(d.finish_reason)
        if d.usage is not None:
            self.usage = d.usage
        return events

    def finish(self) -> list[bytes]:
        """Close what is open and settle the status; ``terminal`` then gives the last event."""
        events = self._close_message() + self._close_call()
        self.status = "incomplete" if self._incomplete else "completed"
        for item in self.output:
            item.pop("_index", None)
        return events

    def terminal(self) -> bytes:
        kind = "response.incomplete" if self._incomplete else "response.completed"
        return self._event(kind, response=self.response())

    def fail(self, err: BlinkError) -> list[bytes]:
        """After the stream began: ``error`` then ``response.failed`` (never a silent end)."""
        self._join_text()
        self.status = "failed"
        self._error = {"code": "server_error", "message": err.message}
        for item in self.output:
            item.pop("_index", None)
            if item.get("status") == "in_progress":
                item["status"] = "incomplete"
        return [self._event("error", code=err.code or err.type, message=err.message, param=err.param),
                self._event("response.failed", response=self.response())]

    # -- items --------------------------------------------------------------------------------

    def prepare_message(self) -> None:
        """Render the first output item's opening events ahead, as a message: called while the
        backend is being asked, so a first token that is text (the usual case) costs only its delta.
        Unused (and harmless) when the output starts otherwise."""
        if self._prepared is None and not self.output:
            self._prepared = (self._seq, *self._message_opening(self._seq))

    def _message_opening(self, seq: int) -> tuple[dict[str, Any], list[bytes]]:
        """A new message item at ``len(output)`` and its two opening events, numbered from ``seq``."""
        msg = {"id": new_id("msg"), "type": "message", "status": "in_progress", "role": "assistant",
               "content": [], "_index": len(self.output)}
        added = _encode("response.output_item.added", seq, output_index=msg["_index"], item=_public(msg))
        part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
        msg["content"].append(part)
        return msg, [added, _encode("response.content_part.added", seq + 1, item_id=msg["id"],
                                    output_index=msg["_index"], content_index=0, part=dict(part))]

    def _open_message(self) -> list[bytes]:
        prepared, self._prepared = self._prepared, None
        if prepared is not None and prepared[0] == self._seq and not self.output:
            _, msg, events = prepared
        else:
            msg, events = self._message_opening(self._seq)
        self._seq += 2
        self.output.append(msg)
        self._message = msg
        self._text = []
        self._text_mid = (b',"item_id":"' + msg["id"].encode() + b'","output_index":' + str(msg["_index"]).encode()
                          + b',"content_index":0,"delta":')
        return events

    def _join_text(self) -> None:
        """The open message's text into its part (kept as pieces while it streams: no quadratic joins)."""
        if self._message is not None:
            self._message["content"][0]["text"] = "".join(self._text)

    def _close_message(self) -> list[bytes]:
        self._join_text()
        msg, self._message = self._message, None
        if msg is None:
            return []
        part = msg["content"][0]
        msg["status"] = "incomplete" if self._incomplete else "completed"
        i = msg["_index"]
        return [self._event("response.output_text.done", item_id=msg["id"], output_index=i, content_index=0,
                            text=part["text"], logprobs=[]),
                self._event("response.content_part.done", item_id=msg["id"], output_index=i, content_index=0,
                            part=dict(part)),
                self._event("response.output_item.done", output_index=i, item=_public(msg))]

    def _call_fragment(self, frag: dict[str, Any]) -> list[bytes]:
        events: list[bytes] = []
        index = frag.get("index", len(self._calls))
        fn = frag.get("function") or {}
        item = self._calls.get(index)
        if item is None:
            events += self._close_message() + self._close_call()
            item = {"id": new_id("fc"), "type": "function_call", "status": "in_progress",
                    "call_id": frag.get("id") or new_id("call"), "name": fn.get("name") or "", "arguments": "",
                    "_index": len(self.output)}
            self.output.append(item)
            self._calls[index] = self._open_call = item
            events.append(self._event("response.output_item.added", output_index=item["_index"],
                                      item=_public(item)))
        elif fn.get("name"):
            item["name"] += fn["name"]
        args = fn.get("arguments") or ""
        if args:
            item["arguments"] += args
            events.append(self._event("response.function_call_arguments.delta", item_id=item["id"],
                                      output_index=item["_index"], delta=args))
        return events

    def _close_call(self) -> list[bytes]:
        item, self._open_call = self._open_call, None
        if item is None:
            return []
        item["status"] = "completed"
        i = item["_index"]
        return [self._event("response.function_call_arguments.done", item_id=item["id"], output_index=i,
                            arguments=item["arguments"], name=item["name"]),
                self._event("response.output_item.done", output_index=i, item=_public(item))]

    def _event(self, kind: str, **fields: Any) -> bytes:
        self._seq += 1
        return _encode(kind, self._seq - 1, **fields)

    def _wrap(self, kind: str, key: bytes, encoded: bytes) -> bytes:
        """An event whose one field (``key``) is already encoded."""
        seq = str(self._seq).encode()
        self._seq += 1
        k = kind.encode()
        return (b"event: " + k + b'\ndata: {"type":"' + k + b'","sequence_number":' + seq + b',"' + key + b'":'
                + encoded + b"}\n\n")


def _encode(kind: str, seq: int, **fields: Any) -> bytes:
    event = {"type": kind, "sequence_number": seq, **fields}
    return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(event) + b"\n\n"


def _public(item: dict[str, Any]) -> dict[str, Any]:
    """A copy of an item as the client sees it (without the renderer's bookkeeping)."""
    out = {k: v for k, v in item.items() if k != "_index"}
    if "content" in out:
        out["content"] = [dict(p) for p in out["content"]]
    return out


def sse(events: list[bytes]) -> bytes:
    return b"".join(events)
