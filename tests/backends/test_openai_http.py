"""OpenAIHTTPBackend against a real local upstream: streaming, errors, timeouts, cancellation."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Awaitable, Callable, Iterator

import pytest
from live_server import LiveServer
from upstream_server import FakeUpstream

from blink.backends.base import Delta, GenerationRequest, SamplingOptions
from blink.backends.openai_http import OpenAIHTTPBackend
from blink.backends.request_body import openai_body, split_body
from blink.gateway.router.attempt_request import continuation, with_logprobs
from blink.protocol.errors import (
    BackendTimeoutError,
    BackendUnavailableError,
    UpstreamClientError,
    UpstreamError,
)


@pytest.fixture(scope="module")
def up() -> Iterator[FakeUpstream]:
    fake = FakeUpstream(tokens=4, api_key="sekrit")
    with LiveServer(fake) as server:
        fake.base_url = f"{server.url}/v1"
        yield fake


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_UPSTREAM_KEY", "sekrit")


def backend(up: FakeUpstream, **kw: object) -> OpenAIHTTPBackend:
    return OpenAIHTTPBackend("b", up.base_url, api_key_env="FAKE_UPSTREAM_KEY", **kw)  # type: ignore[arg-type]


def chat(user: str = "", **raw: object) -> GenerationRequest:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], **raw}
    if user:
        body["user"] = user
    extra, sent = split_body(body)
    max_tokens = body.get("max_tokens", body.get("max_completion_tokens"))
    return GenerationRequest("r1", "m", "chat", SamplingOptions(max_tokens=max_tokens),  # type: ignore[arg-type]
                             messages=body["messages"], extra=extra, sent_options=sent)  # type: ignore[arg-type]


async def collect(b: OpenAIHTTPBackend, req: GenerationRequest) -> list[Delta]:
    return [d async for d in b.stream(req)]


async def test_chat_stream_yields_deltas_and_usage(up: FakeUpstream) -> None:
    b = backend(up, upstream_model="upstream-id")
    deltas = await collect(b, chat())
    assert "".join(d.text for d in deltas) == " t0 t1 t2 t3"
    assert deltas[-1].usage is not None and deltas[-1].usage.completion_tokens == 4
    assert [d.finish_reason for d in deltas if d.finish_reason] == ["stop"]
    sent = up.requests[-1]
    assert sent["model"] == "upstream-id" and sent["stream"] is True
    assert sent["stream_options"] == {"include_usage": True}
    await b.aclose()


async def test_completion_from_options_only(up: FakeUpstream) -> None:
    b = backend(up)
    req = GenerationRequest("r2", "m", "completion", SamplingOptions(max_tokens=2, logprobs=True, top_logprobs=1),
                            prompt="say")
    deltas = await collect(b, req)
    assert "".join(d.text for d in deltas) == " t0 t1"
    assert [lp.token for d in deltas for lp in d.logprobs or []] == [" t0", " t1"]
    assert up.requests[-1]["max_tokens"] == 2 and up.requests[-1]["logprobs"] == 1
    await b.aclose()


async def test_edits_to_the_typed_request_reach_the_upstream(up: FakeUpstream) -> None:
    """A fallback's continuation and the cascade's logprob probe edit only the typed request; the
    body sent upstream carries those edits over the client's body, whose other fields pass through
    and which itself stays as the client sent it."""
    b = backend(up)
    req = chat(user="alice", max_completion_tokens=8)
    edited = continuation(with_logprobs(req), " t0 t1", 2)
    deltas = await collect(b, edited)
    sent = up.requests[-1]
    assert sent["messages"] == [{"role": "user", "content": "hi"}, {"role": "assistant", "content": " t0 t1"}]
    assert sent["max_completion_tokens"] == 6 and "max_tokens" not in sent
    assert sent["logprobs"] is True and sent["user"] == "alice"
    assert any(d.logprobs for d in deltas)
    assert openai_body(req) == {"model": "m", "messages": [{"role": "user", "content": "hi"}], "user": "alice",
                                "max_completion_tokens": 8}
    await b.aclose()


async def test_missing_key_is_upstream_401(up: FakeUpstream, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FAKE_UPSTREAM_KEY")
    b = backend(up)
    with pytest.raises(UpstreamClientError) as info:
        await collect(b, chat())
    assert info.value.status == 401 and info.value.type == "authentication_error"
    await b.aclose()


@pytest.mark.parametrize(
    ("directive", "error", "status"),
    [("fail=400", UpstreamClientError, 400), ("fail=429", UpstreamClientError, 429),
     ("fail=500", UpstreamError, 502), ("fail=503", BackendUnavailableError, 503),
     ("cut=2", UpstreamError, 502), ("error_after=2", UpstreamError, 502)],
)
async def test_upstream_failures_are_typed(up: FakeUpstream, directive: str, error: type, status: int) -> None:
    b = backend(up)
    with pytest.raises(error) as info:
        await collect(b, chat(directive))
    assert info.value.status == status
    if directive == "fail=400":
        assert info.value.param == "temperature" and info.value.code == "bad_value"
    if directive == "fail=429":
        assert info.value.headers == {"retry-after": "2"}
    await b.aclose()


async def test_connect_error_is_unavailable() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens here once closed
    b = OpenAIHTTPBackend("b", f"http://127.0.0.1:{port}/v1", connect_timeout_s=1)
    with pytest.raises(BackendUnavailableError):
        await collect(b, chat())
    assert not (await b.health()).ok
    await b.aclose()


async def test_read_timeout(up: FakeUpstream) -> None:
    b = backend(up, read_timeout_s=0.3)
    with pytest.raises(BackendTimeoutError):
        await collect(b, chat("stall=1"))
    await b.aclose()


async def test_keepalive_comments_do_not_hold_a_stalled_stream_open() -> None:
    """A stalled upstream that keeps sending SSE comments (a proxy's keep-alives) times out like a
    silent one; each comment used to restart the read timeout, so the stream hung for good."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        first = b"data: " + _event(" a") + b"\n\n"
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
                     + b"%x\r\n%s\r\n" % (len(first), first))
        with contextlib.suppress(ConnectionError):
            for _ in range(200):  # bounded: 10 s of keep-alives at most
                writer.write(b"e\r\n: keep-alive\n\n\r\n")
                await writer.drain()
                await asyncio.sleep(0.05)
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    b = OpenAIHTTPBackend("b", f"http://127.0.0.1:{port}/v1", read_timeout_s=0.3)
    got: list[Delta] = []
    try:
        with pytest.raises(BackendTimeoutError):
            async for d in b.stream(chat()):
                got.append(d)
    finally:
        await b.aclose()
        server.close()
    assert [d.text for d in got] == [" a"]


async def test_closing_the_iterator_cancels_upstream(up: FakeUpstream) -> None:
    b = backend(up)
    up.cancelled_event.clear()
    it = b.stream(chat("tokens=500;delay=0.02;tag=7001"))
    first = await anext(it)
    assert first.text == " t0"
    assert b.load().running == 1
    await it.aclose()  # type: ignore[attr-defined]
    assert b.load().running == 0
    for _ in range(100):
        if any("tag=7001" in u for u in up.cancelled_users):
            break
        await asyncio.sleep(0.02)
    assert sum("tag=7001" in u for u in up.cancelled_users) == 1
    await b.aclose()


async def test_health_and_models(up: FakeUpstream) -> None:
    b = backend(up)
    await b.start()
    assert (await b.health()).ok
    assert [c.id for c in b.models()] == ["b"]
    await b.aclose()


def _raw_upstream(content_type: bytes, body: bytes) -> Callable[[asyncio.StreamReader, asyncio.StreamWriter],
                                                                  Awaitable[None]]:
    """A raw HTTP/1.1 upstream that sends its whole response in a single socket write."""
    head = b"HTTP/1.1 200 OK\r\ncontent-type: %s\r\ncontent-length: %d\r\n\r\n" % (content_type, len(body))

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(head + body)
        await writer.drain()
        writer.close()

    return handle


def _one_write_upstream(events: list[bytes]) -> Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]:
    """An SSE upstream whose events all arrive in one read."""
    return _raw_upstream(b"text/event-stream", b"".join(b"data: " + e + b"\n\n" for e in events))


def _event(text: str, finish: str | None = None) -> bytes:
    return b'{"choices":[{"index":0,"delta":{"content":"%s"},"finish_reason":%s}]}' % (
        text.encode(),
        b'"%s"' % finish.encode() if finish else b"null",
    )


async def test_deltas_of_one_read_are_marked_for_one_write() -> None:
    """Every delta but the last of a read says ``more`` (the gateway writes them together),
    except the stream's first token: it goes out at once, not after the rest of its read."""
    role = b'{"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}'
    events = [role, _event(" a"), _event(" b"), _event(" c", "stop"), b"[DONE]"]
    server = await asyncio.start_server(_one_write_upstream(events), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    b = OpenAIHTTPBackend("b", f"http://127.0.0.1:{port}/v1")
    try:
        deltas = await collect(b, chat())
    finally:
        await b.aclose()
        server.close()
    assert [(d.text, d.more) for d in deltas] == [(" a", False), (" b", True), (" c", False)]


async def test_a_bad_event_after_good_ones_still_delivers_the_good_ones() -> None:
    events = [_event(" a"), _event(" b"), b"{not json", _event(" c", "stop")]
    server = await asyncio.start_server(_one_write_upstream(events), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    b = OpenAIHTTPBackend("b", f"http://127.0.0.1:{port}/v1")
    got: list[Delta] = []
    try:
        with pytest.raises(UpstreamError, match="unparseable"):
            async for d in b.stream(chat()):
                got.append(d)
    finally:
        await b.aclose()
        server.close()
    assert [(d.text, d.more) for d in got] == [(" a", False), (" b", False)]


def _whole_upstream(body: bytes) -> Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]:
    """A raw upstream that ignores stream=true and answers one JSON body."""
    return _raw_upstream(b"application/json", body)


@pytest.mark.parametrize(
    ("handler", "match"),
    [
        # A number for the text once reached the renderers: a 500, or a Responses stream cut without its end.
        (_one_write_upstream([_event(" a"), b'{"choices":[{"index":0,"delta":{"content":5}}]}', b"[DONE]"]), "malformed"),
        (_one_write_upstream([b'{"choices":"x"}', b"[DONE]"]), "malformed"),
        (_one_write_upstream([_event(" a", "stop"), b'{"choices":[],"usage":{"prompt_tokens":"1"}}']), "malformed"),
        (_whole_upstream(b'{"choices":[{"index":0,"message":{"content":["a"]},"finish_reason":"stop"}]}'), "malformed"),
        (_whole_upstream(b"<html>not json</html>"), "unparseable"),  # was an internal error (500)
    ],
    ids=["number_content", "string_choices", "string_usage", "whole_list_content", "whole_not_json"],
)
async def test_an_upstream_answer_of_the_wrong_shape_is_an_upstream_error(handler: object, match: str) -> None:
    server = await asyncio.start_server(handler, "127.0.0.1", 0)  # type: ignore[arg-type]
    port = server.sockets[0].getsockname()[1]
    b = OpenAIHTTPBackend("b", f"http://127.0.0.1:{port}/v1")
    try:
        with pytest.raises(UpstreamError, match=match) as info:
            await collect(b, chat())
    finally:
        await b.aclose()
        server.close()
    assert info.value.status == 502


async def test_an_upstream_that_ignores_max_tokens_is_cut_at_the_budget() -> None:
    """An upstream streaming past max_tokens (one that never stops, at worst) ends in an upstream
    error once it exceeds the budget; its tokens used to be relayed for as long as it sent them."""
    events = [_event(f" t{k}") for k in range(50)] + [_event("", "stop"), b"[DONE]"]
    server = await asyncio.start_server(_one_write_upstream(events), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    b = OpenAIHTTPBackend("b", f"http://127.0.0.1:{port}/v1")
    got: list[Delta] = []
    try:
        with pytest.raises(UpstreamError, match="max_tokens"):
            async for d in b.stream(chat(max_tokens=5)):
                got.append(d)
    finally:
        await b.aclose()
        server.close()
    assert "".join(d.text for d in got) == " t0 t1 t2 t3 t4"
    # With echo the prompt's text comes first: not over a budget of 0 (scoring a prompt).
    server = await asyncio.start_server(_one_write_upstream([_event("say"), _event("", "length"), b"[DONE]"]),
                                        "127.0.0.1", 0)
    b = OpenAIHTTPBackend("b", f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1")
    echo = GenerationRequest("r3", "m", "chat", SamplingOptions(max_tokens=0, echo=True), messages=[])
    try:
        assert "".join(d.text for d in await collect(b, echo)) == "say"
    finally:
        await b.aclose()
        server.close()
