from __future__ import annotations

import pytest

from blink.backends.openai_chunks import deltas_from_chunk
from blink.backends.sse_parser import SSEParser


def test_events_split_across_chunks() -> None:
    p = SSEParser()
    assert p.feed(b'data: {"a":') == []
    assert p.feed(b" 1}\n\ndata: [DO") == [b'{"a": 1}']
    assert p.feed(b"NE]\n\n") == [b"[DONE]"]


def test_crlf_comments_multiline_and_flush() -> None:
    p = SSEParser()
    out = p.feed(b": keep-alive\r\n\r\nevent: x\r\ndata: one\r\ndata:two\r\n\r\ndata: last")
    assert out == [b"one\ntwo"]
    assert p.flush() == [b"last"]
    assert p.flush() == []


def test_chunk_to_deltas() -> None:
    chat = {"choices": [{"index": 1, "delta": {"content": "hi"}, "finish_reason": None},
                        {"index": 0, "delta": {"role": "assistant"}, "finish_reason": None}]}
    (d,) = deltas_from_chunk(chat, "chat")
    assert (d.index, d.text) == (1, "hi")
    usage = {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2,
                                      "prompt_tokens_details": {"cached_tokens": 1}}}
    (u,) = deltas_from_chunk(usage, "chat")
    assert u.usage is not None and (u.usage.total_tokens, u.usage.cached_tokens) == (5, 1)
    comp = {"choices": [{"index": 0, "text": "x", "finish_reason": "length",
                         "logprobs": {"tokens": ["x"], "token_logprobs": [-1.0], "top_logprobs": [{"x": -1.0}]}}]}
    (c,) = deltas_from_chunk(comp, "completion")
    assert c.finish_reason == "length" and c.logprobs is not None and c.logprobs[0].top == [("x", -1.0)]


@pytest.mark.parametrize(
    ("chunk", "kind", "expected"),
    [
        ({"choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": None}]}, "chat", [(0, "hi", None)]),
        ({"choices": [{"index": 2, "text": "yo", "finish_reason": None}]}, "completion", [(2, "yo", None)]),
        ({"choices": [{"index": 0, "delta": {"content": "x"}, "finish_reason": "stop"}]}, "chat", [(0, "x", "stop")]),
        ({"choices": [{"index": 0, "delta": {"content": ""}, "finish_reason": None}]}, "chat", []),
        ({"choices": [{"index": 0, "delta": {"content": "a"}}, {"index": 1, "delta": {"content": "b"}}]}, "chat",
         [(0, "a", None), (1, "b", None)]),
    ],
)
def test_plain_and_general_chunks_give_the_same_deltas(chunk: dict, kind: str, expected: list) -> None:  # type: ignore[type-arg]
    assert [(d.index, d.text, d.finish_reason) for d in deltas_from_chunk(chunk, kind)] == expected
