"""The upstream HTTP/1.1 client against real local servers: body framings, keep-alive, faults."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable, Iterator

import pytest
from live_server import LiveServer
from upstream_server import FakeUpstream

from blink.backends.base import GenerationRequest, SamplingOptions
from blink.backends.http1 import Http1ConnectError, Http1Error, Http1Pool
from blink.backends.openai_http import OpenAIHTTPBackend

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def _serve(handler: Handler) -> tuple[asyncio.Server, str]:
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    return server, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1"


def _pool(url: str, read_timeout_s: float = 5.0) -> Http1Pool:
    return Http1Pool(url, connect_timeout_s=2.0, read_timeout_s=read_timeout_s, max_connections=4)


async def _read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")), 0)
    return head + await reader.readexactly(length)


def _answers(*responses: list[bytes], close_after: bool = False) -> tuple[Handler, list[bytes]]:
    """A server answering successive requests on a connection with ``responses`` (each a list of
    separate writes); keeps every request it read."""
    seen: list[bytes] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for parts in responses:
            try:
                seen.append(await _read_request(reader))
            except (asyncio.IncompleteReadError, ConnectionError):
                break
            for part in parts:
                writer.write(part)
                await writer.drain()
                await asyncio.sleep(0.005)  # separate reads on the client side
            if close_after:
                break
        writer.close()

    return handle, seen


async def _body(pool: Http1Pool, path: str = "/x") -> tuple[int, bytes]:
    resp = await pool.request("POST", path, b"content-type: application/json\r\n", b"{}")
    try:
        return resp.status, await resp.read()
    finally:
        resp.release()


async def test_chunked_and_content_length_bodies_on_one_kept_alive_connection() -> None:
    chunked = [b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n", b"3\r\nabc\r\n", b"2\r\nde\r\n0\r\n\r\n"]
    sized = [b"HTTP/1.1 201 Created\r\ncontent-length: 5\r\n\r\nfg", b"hij"]
    handle, seen = _answers(chunked, sized)
    server, url = await _serve(handle)
    pool = _pool(url)
    try:
        assert await _body(pool) == (200, b"abcde")
        assert await _body(pool, "/y") == (201, b"fghij")
    finally:
        await pool.aclose()
        server.close()
    assert pool.connects == 1  # the second request reused the first connection
    assert seen[0].startswith(b"POST /v1/x HTTP/1.1\r\nhost: 127.0.0.1:")
    assert seen[1].startswith(b"POST /v1/y HTTP/1.1\r\n") and seen[1].endswith(b"content-length: 2\r\n\r\n{}")


async def test_body_that_ends_with_the_connection_and_connection_close() -> None:
    until_close = [b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n\r\n", b"all of it"]
    handle, _ = _answers(until_close, close_after=True)
    server, url = await _serve(handle)
    pool = _pool(url)
    try:
        assert await _body(pool) == (200, b"all of it")
        assert await _body(pool) == (200, b"all of it")  # a fresh connection: the last one closed
    finally:
        await pool.aclose()
        server.close()
    assert pool.connects == 2


async def test_idle_connection_closed_by_the_upstream_is_replaced() -> None:
    ok = [b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"]
    handle, _ = _answers(ok, close_after=True)  # answers once, then closes the kept-alive connection
    server, url = await _serve(handle)
    pool = _pool(url)
    try:
        assert await _body(pool) == (200, b"ok")
        await asyncio.sleep(0.05)  # the close reaches the idle connection
        assert await _body(pool) == (200, b"ok")
    finally:
        await pool.aclose()
        server.close()
    assert pool.connects == 2


async def test_cut_body_malformed_http_and_refused_connection() -> None:
    cut = [b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nonly part"]
    handle, _ = _answers(cut, close_after=True)
    server, url = await _serve(handle)
    garbage, garbage_url = await _serve(_answers([b"SPAM SPAM SPAM\r\n\r\n"])[0])
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        refused_url = f"http://127.0.0.1:{s.getsockname()[1]}/v1"  # bound, never listening
    pools = [_pool(url), _pool(garbage_url), _pool(refused_url)]
    try:
        with pytest.raises(Http1Error, match="closed the connection"):
            await _body(pools[0])
        with pytest.raises(Http1Error, match="malformed"):
            await _body(pools[1])
        with pytest.raises(Http1ConnectError):
            await _body(pools[2])
    finally:
        for p in pools:
            await p.aclose()
        server.close()
        garbage.close()


async def test_read_timeout_bounds_the_gap_between_reads() -> None:
    slow = [b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n1\r\na\r\n"]  # then silence

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        writer.write(slow[0])
        await asyncio.sleep(5)
        writer.close()

    server, url = await _serve(handle)
    pool = _pool(url, read_timeout_s=0.2)
    resp = await pool.request("POST", "/x", b"", b"")
    got = b""
    try:
        with pytest.raises(TimeoutError):
            async for data in resp.chunks():
                got += data
    finally:
        resp.release()
        await pool.aclose()
        server.close()
    assert got == b"a"


async def test_waiting_for_a_free_connection_is_bounded_by_the_connect_timeout() -> None:
    ok = [b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"]
    handle, _ = _answers(ok, ok)
    server, url = await _serve(handle)
    pool = Http1Pool(url, connect_timeout_s=0.2, read_timeout_s=5.0, max_connections=1)
    try:
        held = await pool.request("POST", "/x", b"", b"")  # not released: the one slot stays taken
        with pytest.raises(TimeoutError):
            await pool.request("POST", "/x", b"", b"")
        assert await held.read() == b"ok"
        held.release()
        assert await _body(pool) == (200, b"ok")  # the slot came back
    finally:
        await pool.aclose()
        server.close()


async def test_a_body_above_the_high_water_mark_is_read_whole() -> None:
    """Reading pauses above 256 KiB unread and resumes as the caller takes the bytes."""
    big = b"x" * (2 * 1024 * 1024)
    handle, _ = _answers([b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(big), big])
    server, url = await _serve(handle)
    pool = _pool(url)
    try:
        resp = await pool.request("POST", "/x", b"", b"")
        await asyncio.sleep(0.1)  # let the client buffer fill up to the mark
        total = 0
        async for data in resp.chunks():
            total += len(data)
        resp.release()
    finally:
        await pool.aclose()
        server.close()
    assert total == len(big)


@pytest.fixture(scope="module")
def up() -> Iterator[FakeUpstream]:
    fake = FakeUpstream(tokens=4)
    with LiveServer(fake) as server:
        fake.base_url = f"{server.url}/v1"
        yield fake


async def test_backend_streams_reuse_one_connection(up: FakeUpstream) -> None:
    """Streams read to [DONE] hand their connection back: ten requests, one connection."""
    b = OpenAIHTTPBackend("b", up.base_url)
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    req = GenerationRequest("r1", "m", "chat", SamplingOptions(), messages=body["messages"])  # type: ignore[arg-type]
    try:
        for _ in range(10):
            assert "".join([d.text async for d in b.stream(req)]) == " t0 t1 t2 t3"
        assert b._client is not None and b._client.connects == 1
    finally:
        await b.aclose()
