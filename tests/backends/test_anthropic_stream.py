"""An upstream's Anthropic events (split anywhere across reads) -> the deltas a translated answer gives."""

from __future__ import annotations

import orjson
import pytest

from blink.backends.anthropic_stream import AnthropicStreamDecoder, deltas_from_message
from blink.protocol.errors import UpstreamError

EVENTS = [
    {"type": "message_start", "message": {"usage": {"input_tokens": 5, "cache_read_input_tokens": 2, "output_tokens": 1}}},
    {"type": "ping"},
    {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hi"}},
    {"type": "content_block_stop", "index": 0},
    {"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "t", "name": "f", "input": {}}},
    {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": '{"a":1}'}},
    {"type": "content_block_stop", "index": 1},
    {"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": None}, "usage": {"output_tokens": 3}},
    {"type": "message_stop"},
]
BODY = b"".join(b"event: " + e["type"].encode() + b"\r\ndata: " + orjson.dumps(e) + b"\r\n\r\n" for e in EVENTS)


@pytest.mark.parametrize("size", [7, len(BODY)])
def test_split_stream_decodes_to_text_call_and_usage(size: int) -> None:
    dec = AnthropicStreamDecoder("up")
    deltas = [d for i in range(0, len(BODY), size) for d in dec.feed(BODY[i:i + size])]
    assert dec.done and dec.finished and dec.error is None
    assert "".join(d.text for d in deltas) == "Hi"
    calls = [c for d in deltas for c in d.tool_calls or ()]
    assert calls[0] == {"index": 0, "id": "t", "type": "function", "function": {"name": "f", "arguments": ""}}
    assert calls[1] == {"index": 0, "function": {"arguments": '{"a":1}'}}
    last = deltas[-1]
    assert last.finish_reason == "tool_calls" and last.usage is not None
    assert (last.usage.prompt_tokens, last.usage.cached_tokens, last.usage.completion_tokens) == (7, 2, 3)


def test_stop_sequence_and_error_event() -> None:
    dec = AnthropicStreamDecoder("up")
    end = {"type": "message_delta", "delta": {"stop_reason": "stop_sequence", "stop_sequence": "END"}, "usage": {}}
    (delta,) = dec.feed(b"data: " + orjson.dumps(end) + b"\n\n")
    assert (delta.finish_reason, delta.stop_reason) == ("stop", "END")
    failing = AnthropicStreamDecoder("up")
    assert list(failing.feed(b'data: {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}\n\n')) == []
    assert isinstance(failing.error, UpstreamError) and "busy" in failing.error.message
    broken = AnthropicStreamDecoder("up")
    list(broken.feed(b"data: {nope\n\n"))
    assert isinstance(broken.error, UpstreamError)


def test_whole_message_gives_the_same_deltas() -> None:
    message = {"content": [{"type": "text", "text": "Hi"}, {"type": "tool_use", "id": "t", "name": "f", "input": {"a": 1}}],
               "stop_reason": "tool_use", "usage": {"input_tokens": 5, "output_tokens": 3}}
    deltas = deltas_from_message(message, "up")
    assert [d.text for d in deltas if d.text] == ["Hi"]
    assert [c["function"]["arguments"] for d in deltas for c in d.tool_calls or ()] == ["", '{"a":1}']
    assert deltas[-1].finish_reason == "tool_calls" and deltas[-1].usage.prompt_tokens == 5  # type: ignore[union-attr]
