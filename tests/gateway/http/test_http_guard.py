"""GuardedHttpToolsProtocol over raw sockets: head size and count (431), head deadline (408),
per-address connection cap (429), malformed framing answered as OpenAI-style JSON, and the
lingering close of a refused head (answer, EOF, then held unread; counted apart per address)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import httpx
import orjson
import pytest
from live_server import LiveServer
from upstream_server import FakeUpstream

from blink.config.server import ServerSettings
from blink.gateway.http.guard import guarded_protocol
from blink.serve import build_app
from tests.gateway.gateway_helpers import gateway_settings

HEADER_LIMIT = 8192
HEAD_TIMEOUT_S = 1.0
BODY_TIMEOUT_S = 1.0
PER_CLIENT = 6


@pytest.fixture(scope="module")
def guarded(upstream: FakeUpstream) -> Iterator[LiveServer]:
    settings = gateway_settings(upstream, max_header_bytes=HEADER_LIMIT, max_header_count=20,
                                header_timeout_s=HEAD_TIMEOUT_S, body_timeout_s=BODY_TIMEOUT_S, max_connections_per_client=PER_CLIENT)
    with LiveServer(build_app(settings), http=guarded_protocol(settings.server)) as server:
        yield server


def _connect(server: LiveServer, timeout: float = 5, source: str = "127.0.0.1") -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.port), timeout=timeout, source_address=(source, 0))


def _read_all(sock: socket.socket) -> bytes:
    """Everything until the server closes the connection (a timeout fails the test)."""
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def _json_error(reply: bytes, status: int) -> dict[str, object]:
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 %d " % status), head
    assert b"content-type: application/json" in head.lower()
    error = orjson.loads(body)["error"]
    assert set(error) == {"message", "type", "param", "code"}
    return error  # type: ignore[no-any-return]


def test_a_header_over_the_size_limit_gets_431_json_and_is_never_read(guarded: LiveServer) -> None:
    with _connect(guarded) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nhost: x\r\nx-bomb: ")
        try:  # up to 8 MiB: the server answers and closes long before
            for _ in range(128):
                sock.sendall(b"a" * 65536)
        except OSError:
            pass  # closed under our feet: the answer is already in the receive buffer
        reply = _read_all(sock)
    assert _json_error(reply, 431)["code"] == "request_header_fields_too_large"


def test_too_many_header_lines_get_431(guarded: LiveServer) -> None:
    with _connect(guarded) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nhost: x\r\n" + b"".join(b"x-%d: 1\r\n" % i for i in range(30)) + b"\r\n")
        assert _json_error(_read_all(sock), 431)["code"] == "request_header_fields_too_large"


def test_headers_within_the_limits_are_served(guarded: LiveServer) -> None:
    resp = httpx.get(f"{guarded.url}/health", headers={"x-big": "a" * (HEADER_LIMIT // 2)})
    assert resp.status_code == 200


def test_health_answers_while_header_bombs_are_sent(guarded: LiveServer) -> None:
    stop = threading.Event()

    def bomb() -> None:
        while not stop.is_set():
            try:
                with _connect(guarded) as sock:
                    sock.sendall(b"GET / HTTP/1.1\r\nx-bomb: " + b"b" * (1 << 20))
                    _read_all(sock)
            except OSError:
                pass

    threads = [threading.Thread(target=bomb, daemon=True) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        for _ in range(20):
            assert httpx.get(f"{guarded.url}/health", timeout=5).status_code == 200
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=10)


def test_a_slow_head_gets_408_and_the_socket_closes(guarded: LiveServer) -> None:
    with _connect(guarded) as sock:
        started = time.monotonic()
        sock.sendall(b"GET /health HTTP/1.1\r\n")
        try:
            for _ in range(20):  # one header byte every 0.2 s: the head never completes in time
                time.sleep(0.2)
                sock.sendall(b"x")
        except OSError:
            pass
        reply = _read_all(sock)
        elapsed = time.monotonic() - started
    assert _json_error(reply, 408)["code"] == "request_timeout"
    assert elapsed < HEAD_TIMEOUT_S + 2.0  # closed at the deadline, not when the client gave up


def test_a_silent_connection_is_closed_at_the_head_deadline(guarded: LiveServer) -> None:
    with _connect(guarded) as sock:
        started = time.monotonic()
        assert _read_all(sock) == b""  # closed without an answer: nobody asked anything
        assert time.monotonic() - started < HEAD_TIMEOUT_S + 2.0


def test_keep_alive_requests_each_get_a_fresh_head_deadline(guarded: LiveServer) -> None:
    with httpx.Client(base_url=guarded.url) as client:
        for _ in range(3):
            assert client.get("/health").status_code == 200
            time.sleep(HEAD_TIMEOUT_S * 0.6)  # idle between requests is keep-alive, not a slow head


def test_connections_over_the_per_address_cap_get_429(guarded: LiveServer) -> None:
    held = [_connect(guarded) for _ in range(PER_CLIENT)]
    try:
        for sock in held:
            sock.sendall(b"GET /health HTTP/1.1\r\nhost: x\r\n")  # incomplete heads: the connections stay open
        time.sleep(0.2)
        with _connect(guarded) as extra:
            reply = _read_all(extra)
        error = _json_error(reply, 429)
        assert error["code"] == "too_many_connections"
        assert b"retry-after: 1" in reply.lower()
    finally:
        for sock in held:
            sock.close()
    deadline = time.monotonic() + 5
    while True:  # closed connections give their places back
        try:
            if httpx.get(f"{guarded.url}/health", timeout=2).status_code == 200:
                break
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_a_burst_over_the_cap_reads_its_429_not_a_reset(guarded: LiveServer) -> None:
    """Async clients send their request as soon as they connect; a refusal that closed at once
    turned that request into a reset which destroyed the unread 429 (every one of 50 burst requests
    to a real server failed with a connection error). Lingering, each reads its answer. Refused
    connections are held up to the cap per address, so the burst comes from several addresses."""
    import asyncio

    sources = [f"127.0.0.{20 + i}" for i in range(4)]
    held = [_connect(guarded, source=src) for src in sources for _ in range(PER_CLIENT)]
    try:
        for sock in held:
            sock.sendall(b"GET /health HTTP/1.1\r\nhost: x\r\n")  # incomplete heads: the places stay taken
        time.sleep(0.2)

        async def burst(source: str) -> list[int | str]:
            transport = httpx.AsyncHTTPTransport(local_address=source)
            async with httpx.AsyncClient(base_url=guarded.url, timeout=10, transport=transport) as client:
                async def one() -> int | str:
                    try:
                        return (await client.post("/v1/chat/completions", json={"model": "m", "messages": []})).status_code
                    except httpx.TransportError as exc:
                        return type(exc).__name__
                return await asyncio.gather(*[one() for _ in range(PER_CLIENT)])

        async def bursts() -> list[list[int | str]]:
            return await asyncio.gather(*[burst(src) for src in sources])

        assert asyncio.run(bursts()) == [[429] * PER_CLIENT] * len(sources)
    finally:
        for sock in held:
            sock.close()


def test_a_body_trickling_after_its_response_is_cut_off(guarded: LiveServer) -> None:
    """/health answers without reading the body; the rest may not keep the connection forever."""
    with _connect(guarded) as sock:
        sock.sendall(b"POST /health HTTP/1.1\r\nhost: x\r\ncontent-length: 1000\r\n\r\nx")
        started = time.monotonic()
        try:
            for _ in range(25):
                time.sleep(0.2)
                sock.sendall(b"x")
        except OSError:
            pass
        reply = _read_all(sock)
        elapsed = time.monotonic() - started
    assert reply.startswith(b"HTTP/1.1 ")
    assert elapsed < BODY_TIMEOUT_S + 2.0


@pytest.mark.parametrize("request_bytes", [
    b"NOT HTTP AT ALL\r\n\r\n",
    b"GET /health HTTP/1.1\r\nbad header line\r\n\r\n",
    b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n",
    b"GET /health HTTP/9.9\r\n\r\n",
])
def test_malformed_framing_gets_a_json_400(guarded: LiveServer, request_bytes: bytes) -> None:
    with _connect(guarded) as sock:
        sock.sendall(request_bytes)
        error = _json_error(_read_all(sock), 400)
    assert error["type"] == "invalid_request_error" and error["code"] == "invalid_http_request"


LINGER_S = ServerSettings().refused_linger_s  # the fixture keeps the default


def _bomb_until_blocked(sock: socket.socket) -> int:
    """Send an ever-growing header until the socket stops taking bytes; the bytes sent."""
    sock.sendall(b"GET /health HTTP/1.1\r\nhost: x\r\nx-bomb: ")
    sent = 0
    sock.settimeout(0.3)
    try:
        while sent < 64 << 20:
            sent += sock.send(b"a" * 65536)
    except TimeoutError:
        pass
    return sent


def test_an_oversize_head_gets_431_and_eof_then_is_held_unread(guarded: LiveServer) -> None:
    """The answer and EOF arrive at once (no reset eating the 431); the server reads no more, so a
    client that keeps sending stalls on its own buffers until the linger ends the connection."""
    with _connect(guarded, source="127.0.0.4") as sock:
        started = time.monotonic()
        sent = _bomb_until_blocked(sock)  # the server stopped reading: sends block
        assert sent < 64 << 20
        sock.settimeout(5)
        reply = b""
        while chunk := sock.recv(65536):  # EOF after the answer, while the connection is held
            reply += chunk
        assert _json_error(reply, 431)["code"] == "request_header_fields_too_large"
        assert time.monotonic() - started < LINGER_S
        with pytest.raises(OSError):  # then the server closes: the stalled sender learns it
            while time.monotonic() - started < LINGER_S + 5:
                sock.sendall(b"a" * 65536)
        assert time.monotonic() - started >= LINGER_S * 0.9


@pytest.fixture(scope="module")
def lingering(upstream: FakeUpstream) -> Iterator[LiveServer]:
    """A long linger and a cap of 3, so held connections stay held for the whole test."""
    settings = gateway_settings(upstream, max_header_bytes=HEADER_LIMIT, refused_linger_s=30.0,
                                max_connections_per_client=3)
    with LiveServer(build_app(settings), http=guarded_protocol(settings.server)) as server:
        yield server


def _refused_then(server: LiveServer) -> socket.socket:
    """A bomb answered with 431 and EOF; the socket is left open for the caller."""
    sock = _connect(server, source="127.0.0.5")
    sock.sendall(b"GET /health HTTP/1.1\r\nhost: x\r\nx-bomb: " + b"a" * (HEADER_LIMIT * 2))
    reply = b""
    while chunk := sock.recv(65536):
        reply += chunk
    assert _json_error(reply, 431)["code"] == "request_header_fields_too_large"
    return sock


def _still_held(sock: socket.socket) -> bool:
    """Whether the server still holds the connection: writes to a closed one get a reset."""
    try:
        for _ in range(10):
            sock.sendall(b"a" * 1024)
            time.sleep(0.05)
    except OSError:
        return False
    return True


def test_held_refusals_never_take_an_addresss_open_places(lingering: LiveServer) -> None:
    """Bombs held unread are counted apart, under the same cap: that address's next request is
    served, and a bomb past the cap is closed at once instead of held."""
    held = [_refused_then(lingering) for _ in range(3)]
    try:
        assert all(_still_held(sock) for sock in held)
        with _connect(lingering, source="127.0.0.5") as sock:  # its open places are all free
            sock.sendall(b"GET /health HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            assert _read_all(sock).startswith(b"HTTP/1.1 200 ")
        with _refused_then(lingering) as extra:
            assert not _still_held(extra)
    finally:
        for sock in held:
            sock.close()


def test_a_bomb_flood_from_one_address_leaves_another_served_and_logs_one_line(
        guarded: LiveServer, caplog: pytest.LogCaptureFixture) -> None:
    """Four clients loop bombs and extra connections from one address; another address's requests
    all succeed, and the refusals over the cap are logged once for the address, not per connection."""
    stop = threading.Event()
    counts = {"bombs": 0, "refused": 0}

    def flood() -> None:
        while not stop.is_set():
            try:
                with _connect(guarded, timeout=3, source="127.0.0.6") as sock:
                    sock.sendall(b"GET / HTTP/1.1\r\nx-bomb: " + b"b" * (HEADER_LIMIT * 4))
                    reply = sock.recv(64)
                    counts["refused" if b" 429 " in reply else "bombs"] += 1
            except OSError:
                pass

    threads = [threading.Thread(target=flood, daemon=True) for _ in range(4)]
    with caplog.at_level("WARNING", logger="blink.gateway.http"):
        for t in threads:
            t.start()
        try:
            for _ in range(10):
                assert httpx.get(f"{guarded.url}/health", timeout=5).status_code == 200
                time.sleep(0.05)
        finally:
            stop.set()
            for t in threads:
                t.join(timeout=10)
    assert counts["bombs"] > 0
    lines = [r.getMessage() for r in caplog.records if "127.0.0.6" in r.getMessage()]
    assert counts["refused"] == 0 or len(lines) == 1, lines


def test_refusals_are_logged_once_per_address_per_period_with_a_count() -> None:
    from blink.gateway.http.guard import ClientConnections

    clients = ClientConnections(limit=2)
    assert clients.refusal_to_log("10.0.0.1", now=100.0) == 1  # the first refusal is logged
    assert [clients.refusal_to_log("10.0.0.1", now=100.0 + i) for i in range(1, 6)] == [0] * 5
    assert clients.refusal_to_log("10.0.0.2", now=103.0) == 1  # another address has its own period
    assert clients.refusal_to_log("10.0.0.1", now=111.0) == 6  # next period: the five quiet ones too
    for i in range(5000):  # a flood from many addresses stays bounded in memory
        clients.refusal_to_log(f"10.1.{i // 256}.{i % 256}", now=200.0 + i * 0.001)
    assert len(clients.logged_at) <= 1024 and len(clients.refused) <= 1024
