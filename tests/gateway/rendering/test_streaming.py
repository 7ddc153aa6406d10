from __future__ import annotations

import orjson

from blink.backends.base import Delta, TokenLogprob, Usage
from blink.gateway.rendering.aggregate import ResponseAggregator
from blink.gateway.rendering.streaming import DONE, ChunkEncoder, error_event
from blink.protocol.errors import UpstreamError


def parse(event: bytes | None) -> dict:  # type: ignore[type-arg]
    assert event is not None and event.startswith(b"data: ") and event.endswith(b"\n\n")
    return orjson.loads(event[6:])


def test_chat_chunks() -> None:
    enc = ChunkEncoder("chat", "id1", "m", 7, include_usage=True)
    first = parse(enc.encode(Delta(index=0, text="Hi")))
    assert first["object"] == "chat.completion.chunk" and first["created"] == 7 and first["usage"] is None
    assert first["choices"] == [{"index": 0, "delta": {"role": "assistant", "content": "Hi"}, "logprobs": None,
                                 "finish_reason": None}]
    assert parse(enc.encode(Delta(index=0, text="!")))["choices"][0]["delta"] == {"content": "!"}
    assert enc.encode(Delta(index=0, usage=Usage(1, 2))) is None
    fin = parse(enc.encode(Delta(index=0, finish_reason="stop")))["choices"][0]
    assert fin["delta"] == {} and fin["finish_reason"] == "stop"
    usage = parse(enc.usage(Usage(3, 4, 1)))
    assert usage["choices"] == [] and usage["usage"]["total_tokens"] == 7
    assert usage["usage"]["prompt_tokens_details"] == {"cached_tokens": 1}
    assert DONE == b"data: [DONE]\n\n"


def test_completion_chunks_with_logprobs() -> None:
    enc = ChunkEncoder("completion", "id2", "m", 7, include_usage=False)
    lp = [TokenLogprob("ab", -0.5, top=[("ab", -0.5)])]
    c1 = parse(enc.encode(Delta(index=0, text="ab", logprobs=lp)))
    assert "usage" not in c1 and c1["object"] == "text_completion"
    assert c1["choices"][0]["logprobs"]["text_offset"] == [0]
    c2 = parse(enc.encode(Delta(index=0, text="ab", logprobs=lp)))
    assert c2["choices"][0]["logprobs"]["text_offset"] == [2]


def test_error_event() -> None:
    assert parse(error_event(UpstreamError("bad")))["error"]["type"] == "upstream_error"


def test_aggregate_chat_with_tool_calls() -> None:
    agg = ResponseAggregator("chat", 2, want_logprobs=False)
    agg.add(Delta(index=1, text="b"))
    agg.add(Delta(index=0, tool_calls=[{"index": 0, "id": "c1", "function": {"name": "f", "arguments": "{\"a\""}}]))
    agg.add(Delta(index=0, tool_calls=[{"index": 0, "function": {"arguments": ": 1}"}}], finish_reason="tool_calls"))
    agg.add(Delta(index=1, finish_reason="stop", usage=Usage(2, 3)))
    out = agg.render("id", "m", 1)
    c0, c1 = out["choices"]
    assert c0["message"]["tool_calls"][0]["function"] == {"name": "f", "arguments": "{\"a\": 1}"}
    assert c0["message"]["content"] is None and c0["finish_reason"] == "tool_calls"
    assert c1["message"]["content"] == "b" and out["usage"]["total_tokens"] == 5


def test_continuous_usage_and_token_ids_in_every_chunk() -> None:
    import orjson

    from blink.backends.base import Delta, Usage
    from blink.gateway.rendering.streaming import ChunkEncoder

    enc = ChunkEncoder("completion", "cmpl-1", "m", 0, include_usage=True, continuous_usage=True,
                       return_token_ids=True)
    first = enc.encode(Delta(index=0, text="a", token_ids=[5], prompt_token_ids=[1, 2, 3]))
    second = enc.encode(Delta(index=0, text="b", token_ids=[6, 7], finish_reason="stop",
                              usage=Usage(prompt_tokens=3, completion_tokens=3)))
    events = [orjson.loads(c.removeprefix(b"data: ")) for c in (first, second) if c is not None]
    assert [e["usage"]["completion_tokens"] for e in events] == [1, 3]
    assert all(e["usage"]["prompt_tokens"] == 3 for e in events)
    assert events[0]["choices"][0]["prompt_token_ids"] == [1, 2, 3]
    assert [e["choices"][0]["token_ids"] for e in events] == [[5], [6, 7]]
    assert "prompt_token_ids" not in events[1]["choices"][0]


def test_chat_chunks_carry_prompt_token_ids_beside_the_choices() -> None:
    import orjson

    from blink.backends.base import Delta
    from blink.gateway.rendering.streaming import ChunkEncoder

    enc = ChunkEncoder("chat", "c-1", "m", 0, include_usage=False, return_token_ids=True)
    first = enc.encode(Delta(index=0, text="a", token_ids=[5], prompt_token_ids=[1, 2]))
    second = enc.encode(Delta(index=0, text="b", token_ids=[6]))
    assert first is not None and second is not None
    one, two = (orjson.loads(c.removeprefix(b"data: ")) for c in (first, second))
    assert one["prompt_token_ids"] == [1, 2] and one["choices"][0]["token_ids"] == [5]
    assert "prompt_token_ids" not in two and two["choices"][0]["token_ids"] == [6]
