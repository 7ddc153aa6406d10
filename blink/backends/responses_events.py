"""An upstream's Responses API stream (``POST /v1/responses``) -> ``Delta``s.

For an ``openai_http`` upstream configured to serve the Responses API natively, the request goes
to it in that form (``GenerationRequest.native_body``) and its events come back as the same
deltas a chat stream gives: text deltas, tool-call fragments (a ``function_call`` item is one
call, its argument deltas its fragments), and at the end the finish reason and usage. The gateway
then renders them as it renders every answer, so cache, metrics and the stored conversation are
the same whichever way the upstream was reached. The SSE/JSON skeleton is ``NativeEventDecoder``'s.
"""

from __future__ import annotations

from typing import Any

from blink.backends.base import Delta, Usage
from blink.backends.native_events import NativeEventDecoder
from blink.protocol.errors import UpstreamError

_FINISH = {"max_output_tokens": "length", "content_filter": "content_filter"}


class ResponsesEventDecoder(NativeEventDecoder):
    __slots__ = ("_calls",)

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self._calls: dict[str, int] = {}  # function_call item id -> its tool-call index

    def event(self, e: dict[str, Any]) -> list[Delta]:
        kind = e.get("type")
        if kind == "response.output_text.delta":
            return [Delta(text=str(e.get("delta") or ""))]
        if kind == "response.output_item.added" and (e.get("item") or {}).get("type") == "function_call":
            item = e["item"]
            index = self._calls.setdefault(str(item.get("id")), len(self._calls))
            return [Delta(tool_calls=[{"index": index, "id": item.get("call_id"), "type": "function",
                                       "function": {"name": item.get("name") or "", "arguments": ""}}])]
        if kind == "response.function_call_arguments.delta":
            index = self._calls.get(str(e.get("item_id")))
            if index is None:
                return []
            return [Delta(tool_calls=[{"index": index, "function": {"arguments": str(e.get("delta") or "")}}])]
        if kind in ("response.completed", "response.incomplete"):
            self.done = self.finished = True
            return [self.final(e.get("response") or {})]
        if kind in ("response.failed", "error"):
            err = (e.get("response") or {}).get("error") or e
            raise UpstreamError(f"upstream '{self._name}' failed: {str(err.get('message'))[:300]}")
        return []

    def final(self, response: dict[str, Any]) -> Delta:
        """The finish reason and usage of a finished response object."""
        reason = (response.get("incomplete_details") or {}).get("reason")
        finish = _FINISH.get(reason or "", "tool_calls" if self._calls else "stop")
        u = response.get("usage") or {}
        usage = Usage(prompt_tokens=u.get("input_tokens") or 0, completion_tokens=u.get("output_tokens") or 0,
                      cached_tokens=(u.get("input_tokens_details") or {}).get("cached_tokens") or 0)
        return Delta(finish_reason=finish, usage=usage)


def deltas_from_response(obj: dict[str, Any], name: str) -> list[Delta]:
    """A whole (non-streamed) response object -> deltas."""
    decoder = ResponsesEventDecoder(name)
    out: list[Delta] = []
    for item in obj.get("output") or ():
        if item.get("type") == "message":
            text = "".join(p.get("text") or "" for p in item.get("content") or () if p.get("type") == "output_text")
            if text:
                out.append(Delta(text=text))
        elif item.get("type") == "function_call":
            out += decoder.event({"type": "response.output_item.added", "item": {**item, "arguments": ""}})
            out += decoder.event({"type": "response.function_call_arguments.delta", "item_id": item.get("id"),
                                  "delta": item.get("arguments") or ""})
    out.append(decoder.final(obj))
    return out
