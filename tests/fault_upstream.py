"""Upstreams that misbehave on purpose, for failover tests: HTTP faults and TCP-level faults.

``FaultUpstream`` is the fake OpenAI-compatible upstream (``upstream_server.FakeUpstream``) with
one ``fault`` applied to every generation request (``None`` = healthy). ``RawFaultServer``
covers faults below HTTP. Together they give the kinds of fault failover benchmarks inject:

before the first token (a gateway can fail over transparently):
  refuse (nothing listens), reset (accept then close), garbage (non-HTTP bytes), blackhole
  (accept, never answer), http_500, http_502, http_503, http_429, stall_headers (HTTP request
  read, no response), stall_first (headers, then nothing), cut_first (headers, then the
  connection drops), malformed (an unparseable event), html_200 (a 200 HTML page),
  empty_200 (a 200 SSE body with no event), flap (every other request fails with 500);
after the first token (the stream must end with an explicit error, or continue elsewhere):
  stall_mid, cut_mid, error_mid (an SSE error event), truncated (ends without finish/[DONE]);
slow but correct (must complete): slow (large inter-token gaps), slow_first (large TTFT);
the client's own fault (must not fail over): http_400; and ``unsure`` (a complete stream with
low token logprobs) for cascade tests.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from typing import Any

import orjson
from upstream_server import FakeUpstream, _json, _until_disconnect

# After this many tokens the mid-stream faults strike.
MID = 3

PRE_FIRST_TOKEN = (
    "refuse", "reset", "garbage", "blackhole", "http_500", "http_502", "http_503", "http_429", "stall_headers",
    "stall_first", "cut_first", "malformed", "html_200", "empty_200", "flap",
)  # fmt: skip
MID_STREAM = ("stall_mid", "cut_mid", "error_mid", "truncated")
SLOW = ("slow", "slow_first")
RAW_TCP = ("refuse", "reset", "garbage", "blackhole")


class FaultUpstream(FakeUpstream):
    def __init__(self, tokens: int = 8, fault: str | None = None, slow_s: float = 0.05) -> None:
        super().__init__(tokens=tokens)
        self.fault = fault
        self.slow_s = slow_s
        self.hits = 0

    async def _generate(self, req: dict[str, Any], chat: bool, receive: Any, send: Any) -> None:
        self.hits += 1
        fault = self.fault
        if fault == "flap":
            fault = "http_500" if self.hits % 2 == 1 else None
        if fault is None:
            await super()._generate(req, chat, receive, send)
            return
        if fault.startswith("http_"):
            status = int(fault[5:])
            headers = [(b"retry-after", b"1")] if status in (429, 503) else []
            etype = "invalid_request_error" if status < 500 else "server_error"
            body = {"error": {"message": f"injected {status}", "type": etype, "param": None, "code": None}}
            await _json(send, status, body, headers)
            return
        if fault == "stall_headers":
            await _until_disconnect(receive)
            return
        if fault in ("slow", "slow_first"):
            cfg = {"tokens": self.defaults["tokens"], "delay": self.slow_s}
            if fault == "slow_first":
                await asyncio.sleep(self.slow_s)
                cfg["delay"] = 0.0
            task = asyncio.ensure_future(self._respond(req, chat, cfg, send))
            watch = asyncio.ensure_future(_until_disconnect(receive))
            done, _ = await asyncio.wait((task, watch), return_when=asyncio.FIRST_COMPLETED)
            if watch in done and task not in done:
                self.cancelled += 1  # the client (the gateway) went away: e.g. a hedge loser
                self.cancelled_event.set()
            for t in (task, watch):
                t.cancel()
            await asyncio.gather(task, watch, return_exceptions=True)
            return
        await self._faulty_stream(fault, req, chat, receive, send)

    async def _faulty_stream(self, fault: str, req: dict[str, Any], chat: bool, receive: Any, send: Any) -> None:
        ctype = b"text/html" if fault == "html_200" else b"text/event-stream"
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", ctype)]})

        async def body(data: bytes, more: bool = True) -> None:
            await send({"type": "http.response.body", "body": data, "more_body": more})

        if fault == "html_200":
            await body(b"<html><body>502 Bad Gateway</body></html>", more=False)
            return
        if fault == "empty_200":
            await body(b"", more=False)
            return
        if fault == "malformed":
            await body(b"data: {not json\n\n", more=False)
            return
        if fault == "stall_first":
            await _until_disconnect(receive)
            return
        if fault == "unsure":
            await self._unsure(req, chat, body)
            return
        if fault == "cut_first":
            raise ConnectionAbortedError("injected cut before the first token")
        for k in range(MID):
            delta = {"content": f" t{k}"} if chat else None
            choice = {"index": 0, "delta": delta, "finish_reason": None} if chat else {"index": 0, "text": f" t{k}", "finish_reason": None}
            event = {"id": "up", "object": "chat.completion.chunk" if chat else "text_completion", "created": 0,
                     "model": "fake", "choices": [choice]}
            await body(b"data: " + orjson.dumps(event) + b"\n\n")
        if fault == "stall_mid":
            await _until_disconnect(receive)
        elif fault == "cut_mid":
            raise ConnectionAbortedError("injected cut mid-stream")
        elif fault == "error_mid":
            err = {"error": {"message": "injected mid-stream failure", "type": "server_error", "param": None, "code": None}}
            await body(b"data: " + orjson.dumps(err) + b"\n\n", more=False)
        elif fault == "truncated":
            await body(b"", more=False)
        else:
            raise ValueError(f"unknown fault {fault!r}")


    async def _unsure(self, req: dict[str, Any], chat: bool, body: Any) -> None:
        """A complete, well-formed stream whose tokens carry low logprobs (a model guessing)."""
        for k in range(int(self.defaults["tokens"])):
            if self.defaults.get("delay"):
                await asyncio.sleep(self.defaults["delay"])
            lp = {"token": f" t{k}", "logprob": -3.0, "bytes": None, "top_logprobs": []}
            if chat:
                choice = {"index": 0, "delta": {"content": f" t{k}"}, "logprobs": {"content": [lp]}, "finish_reason": None}
            else:
                choice = {"index": 0, "text": f" t{k}", "logprobs": {"tokens": [f" t{k}"], "token_logprobs": [-3.0]},
                          "finish_reason": None}
            event = {"id": "up", "object": "chat.completion.chunk" if chat else "text_completion", "created": 0,
                     "model": "fake", "choices": [choice]}
            await body(b"data: " + orjson.dumps(event) + b"\n\n")
        end = {"index": 0, "delta": {}, "finish_reason": "stop"} if chat else {"index": 0, "text": "", "finish_reason": "stop"}
        event = {"id": "up", "object": "chat.completion.chunk" if chat else "text_completion", "created": 0,
                 "model": "fake", "choices": [end]}
        await body(b"data: " + orjson.dumps(event) + b"\n\ndata: [DONE]\n\n", more=False)


class RawFaultServer:
    """A TCP server below HTTP: ``reset`` closes each connection at once, ``garbage`` answers
    non-HTTP bytes, ``blackhole`` reads and never answers; ``refuse`` only reserves a free port
    that nothing listens on."""

    def __init__(self, fault: str) -> None:
        self.fault = fault
        self.port = 0
        self.accepted = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stop: asyncio.Event | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> RawFaultServer:
        if self.fault == "refuse":
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                self.port = s.getsockname()[1]
            return self
        ready = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._serve(ready)), daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("raw fault server did not start")
        return self

    async def _serve(self, ready: threading.Event) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = server.sockets[0].getsockname()[1]
        ready.set()
        async with server:
            await self._stop.wait()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        try:
            if self.fault == "reset":
                sock = writer.get_extra_info("socket")
                # SO_LINGER 0: close sends RST, not FIN — a real connection reset.
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            elif self.fault == "garbage":
                await reader.read(65536)
                writer.write(b"\x00\xffSSH-2.0-nope\r\n\r\n garbage \x00")
                await writer.drain()
            elif self.fault == "blackhole":
                while await reader.read(65536):
                    pass
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(timeout=10)

    def __enter__(self) -> RawFaultServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
