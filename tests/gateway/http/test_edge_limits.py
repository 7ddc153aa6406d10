"""Body-size and concurrent-stream limits, over real sockets."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import httpx
import openai
import orjson
import pytest
from live_server import LiveServer
from upstream_server import FakeUpstream

from blink.serve import build_app
from tests.gateway.gateway_helpers import gateway_settings

LIMIT = 4096
M = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def small(upstream: FakeUpstream) -> Iterator[LiveServer]:
    app = build_app(gateway_settings(upstream, max_body_bytes=LIMIT, max_concurrent_streams=2))
    with LiveServer(app) as server:
        yield server


def _big_body() -> bytes:
    return b'{"model": "fake", "messages": [{"role": "user", "content": "' + b"x" * 10_000 + b'"}]}'


def test_declared_length_over_limit_is_413(small: LiveServer) -> None:
    resp = httpx.post(f"{small.url}/v1/chat/completions", content=_big_body())
    assert resp.status_code == 413
    assert resp.json()["error"]["type"] == "invalid_request_error"
    assert resp.json()["error"]["code"] == "request_too_large"


def test_chunked_body_over_limit_is_413(small: LiveServer) -> None:
    def chunks() -> Iterator[bytes]:
        body = _big_body()
        for i in range(0, len(body), 1000):
            yield body[i : i + 1000]

    resp = httpx.post(f"{small.url}/v1/chat/completions", content=chunks())
    assert resp.request.headers.get("transfer-encoding") == "chunked"
    assert resp.status_code == 413
    assert resp.json()["error"]["code"] == "request_too_large"


def test_small_chunked_body_is_fine(small: LiveServer) -> None:
    body = b'{"model": "fake", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}'
    resp = httpx.post(f"{small.url}/v1/chat/completions", content=iter([body[:10], body[10:]]))
    assert resp.status_code == 200


def test_lying_content_length_never_hangs_or_500s(small: LiveServer) -> None:
    # Claims 20 bytes, sends far more than the limit: only 20 bytes are the body.
    with socket.create_connection(("127.0.0.1", small.port), timeout=5) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 20\r\n\r\n")
        try:
            sock.sendall(_big_body() * 10)
        except OSError:
            pass  # the server may close first
        reply = b""
        while b"\r\n\r\n" not in reply:
            data = sock.recv(65536)
            if not data:
                break
            reply += data
    status = int(reply.split(b" ", 2)[1])
    assert status in (400, 413)


def test_invalid_content_length_is_rejected(small: LiveServer) -> None:
    with socket.create_connection(("127.0.0.1", small.port), timeout=5) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 99999999999\r\n\r\n")
        reply = sock.recv(65536)
    assert reply.startswith(b"HTTP/1.1 413")


def test_concurrent_stream_limit(small: LiveServer, upstream: FakeUpstream) -> None:
    client = openai.OpenAI(base_url=f"{small.url}/v1", api_key="x", max_retries=0)
    streams = [
        client.chat.completions.create(model="fake", messages=M, stream=True, user="tokens=200;delay=0.05")
        for _ in range(2)
    ]
    for s in streams:
        next(iter(s))  # both are streaming now
    with pytest.raises(openai.APIStatusError) as info:
        client.chat.completions.create(model="fake", messages=M, max_tokens=1)
    assert info.value.status_code == 503
    assert info.value.response.headers["retry-after"] == "1"
    assert info.value.body["type"] == "server_overloaded"  # type: ignore[index]
    for s in streams:
        s.close()
    deadline = time.monotonic() + 5
    while True:  # the slots free up as soon as the gateway sees the disconnects
        try:
            resp = client.chat.completions.create(model="fake", messages=M, max_tokens=1)
            break
        except openai.APIStatusError:
            assert time.monotonic() < deadline
            time.sleep(0.05)
    assert resp.choices[0].message.content == " t0"


BODY_TIMEOUT_S = 1.0
CHAT_BODY = b'{"model": "fake", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}'


@pytest.fixture(scope="module")
def deadline_server(upstream: FakeUpstream) -> Iterator[LiveServer]:
    app = build_app(gateway_settings(upstream, max_concurrent_streams=2, body_timeout_s=BODY_TIMEOUT_S))
    with LiveServer(app) as server:
        yield server


def _trickler(server: LiveServer) -> socket.socket:
    """A connection that sent a generation head and the first byte of a body it never finishes."""
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                 b"content-length: %d\r\n\r\n{" % len(CHAT_BODY))
    return sock


def test_a_slow_body_gets_408_and_the_connection_closes(deadline_server: LiveServer) -> None:
    with _trickler(deadline_server) as sock:
        started = time.monotonic()
        try:
            for _ in range(10):  # a byte every 0.3 s: the body cannot be in by the deadline
                time.sleep(0.3)
                sock.sendall(b" ")
        except OSError:
            pass
        reply = b""
        while chunk := sock.recv(65536):
            reply += chunk
        elapsed = time.monotonic() - started
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408 ") and b"connection: close" in head.lower()
    assert orjson.loads(body)["error"]["code"] == "request_timeout"
    assert elapsed < BODY_TIMEOUT_S + 2.0


def test_trickling_bodies_take_no_concurrency_slot(deadline_server: LiveServer) -> None:
    """64 connections hold half-sent bodies on a server with 2 slots: honest requests still pass."""
    held = [_trickler(deadline_server) for _ in range(64)]
    try:
        time.sleep(0.2)
        client = openai.OpenAI(base_url=f"{deadline_server.url}/v1", api_key="x", max_retries=0)
        for _ in range(3):
            resp = client.chat.completions.create(model="fake", messages=M, max_tokens=1)
            assert resp.choices[0].message.content == " t0"
    finally:
        for sock in held:
            sock.close()


def test_a_buffered_body_reaches_the_app_whole(deadline_server: LiveServer) -> None:
    """Sent in pieces, read whole by the middleware, replayed to the route: the request is served."""
    resp = httpx.post(f"{deadline_server.url}/v1/chat/completions",
                      content=iter([CHAT_BODY[:7], CHAT_BODY[7:20], CHAT_BODY[20:]]))
    assert resp.status_code == 200 and resp.json()["choices"][0]["message"]["content"] == " t0"
