"""HTTP/1.0 requests get close-delimited bodies (never chunked ones); HTTP/1.1 is unchanged."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest
from live_server import LiveServer

from blink.gateway.http.uvicorn_protocol import CoalescingHttpToolsProtocol


async def app(scope: Any, receive: Any, send: Any) -> None:
    """``/stream``: an SSE-like body in two parts, no length; ``/sized``: a body with its length."""
    if scope["type"] != "http":
        return
    if scope["path"] == "/sized":
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})
        return
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
    await send({"type": "http.response.body", "body": b"data: one\n\n", "more_body": True})
    await send({"type": "http.response.body", "body": b"data: two\n\n", "more_body": False})


@pytest.fixture(scope="module")
def server() -> Iterator[LiveServer]:
    with LiveServer(app, lifespan="off", http=CoalescingHttpToolsProtocol) as live:
        yield live


def _exchange(port: int, request: bytes) -> tuple[bytes, bytes]:
    """Send ``request`` and read until the server closes: (head, body)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(request)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return head.lower(), body


def test_an_http10_stream_is_close_delimited(server: LiveServer) -> None:
    # Chunk sizes used to reach the HTTP/1.0 client inside the body ("b\r\ndata: one...").
    head, body = _exchange(server.port, b"GET /stream HTTP/1.0\r\n\r\n")
    assert b"transfer-encoding" not in head and b"connection: close" in head
    assert body == b"data: one\n\ndata: two\n\n"


def test_an_http10_sized_body_and_http11_streams_keep_their_framing(server: LiveServer) -> None:
    head, body = _exchange(server.port, b"GET /sized HTTP/1.0\r\n\r\n")
    assert b"content-length: 2" in head and body == b"ok"
    head, body = _exchange(server.port, b"GET /stream HTTP/1.1\r\nhost: t\r\nconnection: close\r\n\r\n")
    assert b"transfer-encoding: chunked" in head
    assert body == b"b\r\ndata: one\n\n\r\nb\r\ndata: two\n\n\r\n0\r\n\r\n"
