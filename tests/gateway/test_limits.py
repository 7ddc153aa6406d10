"""Body-size and concurrent-stream limits, over real sockets."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import httpx
import openai
import pytest
from gateway_helpers import gateway_settings
from live_server import LiveServer
from upstream_server import FakeUpstream

from blink.serve import build_app

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
