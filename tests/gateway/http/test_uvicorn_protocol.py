"""CoalescingHttpToolsProtocol: a response's head leaves with its first body bytes, in one write."""

from __future__ import annotations

import asyncio
import socket
import threading
from typing import Any

import httpx
import openai
import pytest
from live_server import LiveServer
from starlette.requests import Request
from upstream_server import FakeUpstream

from blink.config.gateway import CacheSettings, ExactCacheSettings
from blink.config.server import ServerSettings
from blink.gateway.http.guard import guarded_protocol
from blink.gateway.http.uvicorn_protocol import CoalescingHttpToolsProtocol
from blink.serve import build_app
from tests.gateway.gateway_helpers import gateway_settings

REQUEST = b"GET /x HTTP/1.1\r\nhost: t\r\n\r\n"


class HeldApp:
    """Sends its head, then waits for ``release`` before the first body bytes."""

    def __init__(self) -> None:
        self.release = threading.Event()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
        while not self.release.is_set():
            await asyncio.sleep(0.005)
        await send({"type": "http.response.body", "body": b"data: one\n\n", "more_body": True})
        await send({"type": "http.response.body", "body": b"data: two\n\n", "more_body": False})


class FailingApp:
    """Starts a response, then raises before any body: a whole 500 replaces the held head."""

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        await send({"type": "http.response.start", "status": 200, "headers": []})
        raise RuntimeError("boom")


def _recv_until(sock: socket.socket, marker: bytes, data: bytes = b"") -> bytes:
    """``data`` plus what arrives until ``marker`` has been seen (it may already be in ``data``)."""
    while marker not in data:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def test_the_head_waits_for_the_first_body_bytes_and_goes_with_them() -> None:
    app = HeldApp()
    live = LiveServer(app, lifespan="off", http=CoalescingHttpToolsProtocol)
    with live as server, socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.sendall(REQUEST)
        sock.settimeout(0.3)
        with pytest.raises(TimeoutError):  # the start was sent, but nothing is on the wire yet
            sock.recv(65536)
        app.release.set()
        sock.settimeout(5)
        first = sock.recv(65536)  # one write: head and first chunk arrive together
        assert first.startswith(b"HTTP/1.1 200 OK\r\n") and b"content-type: text/event-stream" in first
        assert b"data: one" in first
        # The second chunk and the terminator may have come in the same recv as the first.
        whole = _recv_until(sock, b"0\r\n\r\n", first)
        assert b"data: two" in whole


def test_plain_responses_and_keep_alive_are_unchanged() -> None:
    app = HeldApp()
    app.release.set()
    with LiveServer(app, lifespan="off", http=CoalescingHttpToolsProtocol) as server, httpx.Client(base_url=server.url) as client:
        for _ in range(3):  # one keep-alive connection, several exchanges
            r = client.get("/x")
            assert r.status_code == 200 and r.text == "data: one\n\ndata: two\n\n"


def test_an_app_that_fails_after_its_start_gets_uvicorns_500() -> None:
    with LiveServer(FailingApp(), lifespan="off", http=CoalescingHttpToolsProtocol) as server:
        assert httpx.get(f"{server.url}/x").status_code == 500


def test_the_plain_protocol_writes_the_head_at_once() -> None:
    """The contrast that makes the first test meaningful: uvicorn's own protocol sends the head early."""
    app = HeldApp()
    with LiveServer(app, lifespan="off", http="httptools") as server, socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.sendall(REQUEST)
        sock.settimeout(5)
        assert sock.recv(65536).startswith(b"HTTP/1.1 200 OK\r\n")
        app.release.set()
        assert b"data: two" in _recv_until(sock, b"0\r\n\r\n")


def test_coalesce_writes_off_writes_the_head_at_once() -> None:
    """``server.coalesce_writes: false``: the guarded protocol keeps uvicorn's two writes."""
    app = HeldApp()
    http = guarded_protocol(ServerSettings(coalesce_writes=False))
    with LiveServer(app, lifespan="off", http=http) as server, socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.sendall(REQUEST)
        sock.settimeout(5)
        assert sock.recv(65536).startswith(b"HTTP/1.1 200 OK\r\n")
        app.release.set()
        assert b"data: two" in _recv_until(sock, b"0\r\n\r\n")


class EchoApp:
    """Reads the body, answers it back; ``204`` and HEAD get a head and no body bytes."""

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = await Request(scope, receive).body()
        if scope["path"] == "/empty":
            await send({"type": "http.response.start", "status": 204, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"%d" % len(body))]})
        await send({"type": "http.response.body", "body": body})


def test_a_response_without_body_bytes_still_leaves() -> None:
    """A held head with nothing after it goes out when the response completes (204, HEAD)."""
    with LiveServer(EchoApp(), lifespan="off", http=CoalescingHttpToolsProtocol) as server, \
            httpx.Client(base_url=server.url, timeout=5) as client:
        assert client.post("/empty").status_code == 204
        assert client.head("/x").status_code == 200
        assert client.post("/x", content=b"kept alive").text == "kept alive"


def test_100_continue_is_not_held() -> None:
    """``100 Continue`` goes out at once: the client sends its body only after reading it."""
    head = b"POST /x HTTP/1.1\r\nhost: t\r\ncontent-length: 5\r\nexpect: 100-continue\r\n\r\n"
    with LiveServer(EchoApp(), lifespan="off", http=CoalescingHttpToolsProtocol) as server, \
            socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.sendall(head)
        sock.settimeout(5)
        assert sock.recv(65536).startswith(b"HTTP/1.1 100 Continue\r\n")
        sock.sendall(b"hello")
        answer = _recv_until(sock, b"hello")
        assert answer.startswith(b"HTTP/1.1 200 OK\r\n") and answer.endswith(b"hello")


def test_the_gateway_streams_and_fails_through_it(upstream: FakeUpstream) -> None:
    """The whole gateway as ``blink serve`` runs it: a stream with the openai client, a JSON error."""
    live = LiveServer(build_app(gateway_settings(upstream)), http=CoalescingHttpToolsProtocol)
    with live as server:
        client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0)
        for _ in range(2):
            stream = client.chat.completions.create(model="fake", messages=[{"role": "user", "content": "hi"}],
                                                    stream=True, max_tokens=8)  # fmt: skip
            assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
        with pytest.raises(openai.NotFoundError):
            client.chat.completions.create(model="nope", messages=[{"role": "user", "content": "hi"}])


def test_cache_replays_go_through_it(upstream: FakeUpstream) -> None:
    """A miss fills, the same request replays from the cache: whole JSON and SSE alike."""
    settings = gateway_settings(upstream)
    settings.cache = CacheSettings(exact=ExactCacheSettings(enabled=True), store="memory")
    with LiveServer(build_app(settings), http=CoalescingHttpToolsProtocol) as server:
        client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0)
        ask = {"model": "fake", "messages": [{"role": "user", "content": "same"}], "temperature": 0, "max_tokens": 8}
        first = client.chat.completions.with_raw_response.create(**ask)  # type: ignore[call-overload]
        again = client.chat.completions.with_raw_response.create(**ask)  # type: ignore[call-overload]
        assert again.headers["x-blink-cache"] == "exact"
        assert again.parse().choices[0].message.content == first.parse().choices[0].message.content
        streamed = client.chat.completions.create(**ask, stream=True)  # type: ignore[call-overload]
        text = "".join(c.choices[0].delta.content or "" for c in streamed if c.choices)
        assert text == first.parse().choices[0].message.content
