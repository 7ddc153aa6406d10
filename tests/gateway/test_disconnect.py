"""A client that goes away aborts the generation: the upstream sees its stream cancelled."""

from __future__ import annotations

import socket
import time

import orjson
from live_server import LiveServer
from upstream_server import FakeUpstream


def _open_stream(gateway: LiveServer, user: str) -> socket.socket:
    body = orjson.dumps(
        {"model": "fake", "messages": [{"role": "user", "content": "hi"}], "stream": True, "user": user}
    )
    sock = socket.create_connection(("127.0.0.1", gateway.port), timeout=5)
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\n\r\n"
    ).encode()
    sock.sendall(head + body)
    return sock


def test_disconnect_mid_stream_cancels_upstream(gateway: LiveServer, upstream: FakeUpstream) -> None:
    before = upstream.cancelled
    sock = _open_stream(gateway, "tokens=400;delay=0.02")
    received = b""
    while received.count(b"data: ") < 3:
        received += sock.recv(65536)
    assert b" 200 OK" in received.split(b"\r\n", 1)[0]
    t0 = time.monotonic()
    sock.close()
    assert upstream.cancelled_event.wait(5), "upstream never saw the disconnect"
    assert upstream.cancelled == before + 1
    # Far sooner than the 8 s the full stream would take.
    assert time.monotonic() - t0 < 2.0


def test_disconnect_before_first_token_cancels_upstream(gateway: LiveServer, upstream: FakeUpstream) -> None:
    before = upstream.cancelled
    sock = _open_stream(gateway, "stall=1")
    time.sleep(0.3)  # the upstream is now holding the stream open without tokens
    sock.close()
    assert upstream.cancelled_event.wait(5), "upstream never saw the disconnect"
    assert upstream.cancelled == before + 1


def test_gateway_keeps_serving_after_disconnects(gateway: LiveServer) -> None:
    import httpx

    resp = httpx.post(
        f"{gateway.url}/v1/chat/completions",
        json={"model": "fake", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
    )
    assert resp.status_code == 200 and resp.json()["choices"][0]["message"]["content"] == " t0 t1"
