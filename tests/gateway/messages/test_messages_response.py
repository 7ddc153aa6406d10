"""Deltas -> Anthropic's message and event stream: block order, stop reasons, pings, replays, failures."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import orjson
import pytest
from live_server import LiveServer
from slow_stream import PATH, slow_stream_app
from starlette.applications import Starlette

from blink.backends.base import Delta, GenerationRequest, SamplingOptions, Usage
from blink.gateway.cache.entry import CachedChoice, CachedResponse
from blink.gateway.messages.response import MessagesEncoder, MessagesReplayResponse


def _req(stop: list[str] | None = None) -> GenerationRequest:
    messages = [{"role": "user", "content": "hi"}]
    return GenerationRequest("msg_1", "m", "chat", SamplingOptions(stop=stop or []), messages=messages)


def _events(body: bytes) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for block in body.decode().strip().split("\n\n"):
        name, data = block.split("\n", 1)
        out.append((name.removeprefix("event: "), orjson.loads(data.removeprefix("data: "))))
    return out


TEXT_THEN_CALL = [
    Delta(text="Let me check."),
    Delta(tool_calls=[{"index": 0, "id": "call_1", "type": "function", "function": {"name": "f", "arguments": ""}}]),
    Delta(tool_calls=[{"index": 0, "function": {"arguments": '{"a": '}}]),
    Delta(tool_calls=[{"index": 0, "function": {"arguments": "1}"}}]),
    Delta(finish_reason="tool_calls", usage=Usage(prompt_tokens=10, completion_tokens=4, cached_tokens=3)),
]


def test_text_then_tool_call_streams_as_two_blocks() -> None:
    enc = MessagesEncoder(_req())
    body = enc.start() + b"".join(enc.encode(d) for d in TEXT_THEN_CALL) + enc.end()
    events = _events(body)
    assert [(n, e.get("index")) for n, e in events] == [
        ("message_start", None), ("content_block_start", 0), ("content_block_delta", 0), ("content_block_stop", 0),
        ("content_block_start", 1), ("content_block_delta", 1), ("content_block_delta", 1),
        ("content_block_stop", 1), ("message_delta", None), ("message_stop", None)]
    assert events[4][1]["content_block"] == {"type": "tool_use", "id": "call_1", "name": "f", "input": {}}
    assert events[5][1]["delta"] == {"type": "input_json_delta", "partial_json": '{"a": '}
    assert events[8][1]["delta"] == {"stop_reason": "tool_use", "stop_sequence": None}
    # Cache reads are apart from input_tokens, as Anthropic counts them.
    assert events[8][1]["usage"] == {"input_tokens": 7, "output_tokens": 4, "cache_creation_input_tokens": 0,
                                     "cache_read_input_tokens": 3}
    msg = enc.message()
    assert msg["content"] == [{"type": "text", "text": "Let me check."},
                              {"type": "tool_use", "id": "call_1", "name": "f", "input": {"a": 1}}]


@pytest.mark.parametrize(("finish", "matched", "stops", "reason", "sequence"), [
    ("stop", None, [], "end_turn", None),
    ("length", None, [], "max_tokens", None),
    ("stop", "END", ["END", "STOP"], "stop_sequence", "END"),
    ("stop", "</s>", ["END"], "end_turn", None),  # a stop string the client did not send is not reported
])
def test_stop_reasons(finish: str, matched: str | None, stops: list[str], reason: str, sequence: str | None) -> None:
    enc = MessagesEncoder(_req(stops))
    enc.encode(Delta(text="x"))
    enc.encode(Delta(finish_reason=finish, stop_reason=matched))
    msg = enc.message()
    assert (msg["stop_reason"], msg["stop_sequence"]) == (reason, sequence)


def test_cut_tool_arguments_are_kept_not_dropped() -> None:
    enc = MessagesEncoder(_req())
    for d in TEXT_THEN_CALL[1:3]:
        enc.encode(d)
    enc.encode(Delta(finish_reason="length"))
    assert enc.message()["content"][0]["input"] == {"_raw_arguments": '{"a": '}


def test_replay_renders_like_a_live_answer() -> None:
    entry = CachedResponse("chat", [CachedChoice("Hello", "stop")], prompt_tokens=5, completion_tokens=1)
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def receive() -> dict[str, Any]:
        return {"type": "http.disconnect"}

    asyncio.run(MessagesReplayResponse(_req(), entry, stream=True, headers=[])({}, receive, send))
    names = [n for n, _ in _events(sent[1]["body"])]
    assert names == ["message_start", "content_block_start", "content_block_delta", "content_block_stop",
                     "message_delta", "message_stop"]
    sent.clear()
    asyncio.run(MessagesReplayResponse(_req(), entry, stream=False, headers=[])({}, receive, send))
    msg = orjson.loads(sent[1]["body"])
    assert msg["content"] == [{"type": "text", "text": "Hello"}] and msg["usage"]["cache_read_input_tokens"] == 5


def _app(base_url: str) -> Starlette:
    return slow_stream_app(base_url, _req, MessagesEncoder)


@pytest.mark.parametrize("slow_then", ["slow_first"], indirect=True)
def test_pings_flow_before_a_slow_first_token(slow_then: str) -> None:
    with LiveServer(_app(slow_then)) as gw:
        names = [n for n, _ in _events(httpx.post(f"{gw.url}{PATH}", timeout=10).content)]
    first = names.index("message_start")
    assert first >= 2 and set(names[:first]) == {"ping"}
    assert names[-2:] == ["message_delta", "message_stop"]


@pytest.mark.parametrize("slow_then", ["stall_first"], indirect=True)
def test_failure_after_pings_is_an_error_event(slow_then: str) -> None:
    with LiveServer(_app(slow_then)) as gw:
        r = httpx.post(f"{gw.url}{PATH}", timeout=10)
    events = _events(r.content)
    assert r.status_code == 200 and events[0][0] == "ping"
    name, data = events[-1]
    assert name == "error" and data["type"] == "error" and data["error"]["type"] == "timeout_error"
    assert "message_stop" not in [n for n, _ in events]
