"""The native decoders' shared skeleton: an upstream event or answer of the wrong shape is an
``UpstreamError``, never a value of the wrong type passed on (a renderer then failed: a 500, or a
stream cut without its closing events) nor an unhandled exception."""

from __future__ import annotations

from typing import Any

import pytest

from blink.backends.anthropic_stream import AnthropicStreamDecoder, deltas_from_message
from blink.backends.native_events import NativeEventDecoder, checked_deltas
from blink.backends.responses_events import ResponsesEventDecoder, deltas_from_response
from blink.protocol.errors import UpstreamError


@pytest.mark.parametrize(("decoder", "event"), [
    (AnthropicStreamDecoder, b'{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":5}}'),
    (AnthropicStreamDecoder, b'{"type":"content_block_start","index":0,"content_block":"text"}'),
    (AnthropicStreamDecoder, b'{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":"many"}}'),
    (ResponsesEventDecoder, b'{"type":"response.output_item.added","output_index":0,"item":"message"}'),
    (ResponsesEventDecoder, b'{"type":"response.completed","response":{"status":"completed","usage":{"input_tokens":"3"}}}'),
], ids=["text_number", "block_string", "usage_string", "item_string", "response_usage_string"])
def test_a_streamed_event_of_the_wrong_shape_is_an_upstream_error(decoder: type[NativeEventDecoder], event: bytes) -> None:
    dec = decoder("up")
    assert list(dec.feed(b"data: " + event + b"\n\n")) == []
    assert isinstance(dec.error, UpstreamError) and "malformed" in dec.error.message


@pytest.mark.parametrize(("api", "whole"), [
    ("messages", {"content": "hello"}),
    ("messages", {"content": [{"type": "text", "text": 5}]}),
    ("responses", {"output": [{"type": "message", "content": [{"type": "output_text", "text": 5}]}]}),
], ids=["message_string_content", "message_number_text", "response_number_text"])
def test_a_whole_answer_of_the_wrong_shape_is_an_upstream_error(api: str, whole: dict[str, Any]) -> None:
    read = deltas_from_message if api == "messages" else deltas_from_response
    with pytest.raises(UpstreamError, match="malformed"):
        checked_deltas("up", read, whole, "up")
