"""A real, tiny OpenAI-compatible upstream for tests and benchmarks (pure ASGI, no framework).

It streams ``tokens`` tokens (`` t0``, `` t1``...) per choice with ``delay`` seconds between
them, and can be told to misbehave. Behaviour comes from ``FakeUpstream.defaults``, overridden
per request by the ``user`` field: ``user="tokens=5;delay=0.01;fail=429;stall=1;cut=3"``.

- ``fail=STATUS``: answer with an OpenAI-style error (``param``/``code`` set for 400s).
- ``stall=1``: send nothing until the client goes away.
- ``cut=K``: after K tokens, drop the connection without finishing the body.
- ``error_after=K``: after K tokens, send an SSE error event.

``fail_next`` (a list of statuses) makes the next generation requests, whatever their ``user``,
fail with those statuses in turn, then behave again: an upstream that is down for a while.

Every request body is kept in ``requests``; ``cancelled`` counts streams whose client went
away before the end (``cancelled_event`` is set on each). Run as a script to serve it:
``python tests/upstream_server.py --port 8001 --tokens 32``.
"""

from __future__ import annotations

import argparse
import asyncio
import threading
import time
from typing import Any

import orjson
from asgi_parts import read_body, serve_lifespan


class CutConnection(Exception):
    """Raised inside the app to make the server drop the connection mid-body."""


class FakeUpstream:
    def __init__(self, tokens: int = 8, delay: float = 0.0, api_key: str | None = None) -> None:
        self.defaults: dict[str, float] = {"tokens": tokens, "delay": delay}
        self.api_key = api_key
        self.requests: list[dict[str, Any]] = []
        self.cancelled = 0
        # The ``user`` field of every cancelled request, so a test can name the one it cut.
        self.cancelled_users: list[str] = []
        # The bodies of cancelled and of completed requests: a test on a shared upstream can tell
        # its own requests' fates from those of other tests' stragglers.
        self.cancelled_requests: list[dict[str, Any]] = []
        self.completed_requests: list[dict[str, Any]] = []
        self.completed = 0
        self.fail_next: list[int] = []
        self.cancelled_event = threading.Event()
        self.base_url = ""

    # -- ASGI ---------------------------------------------------------------------------------

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await serve_lifespan(receive, send)
            return
        path, method = scope["path"], scope["method"]
        if self.api_key is not None:
            auth = dict(scope["headers"]).get(b"authorization", b"")
            if auth != f"Bearer {self.api_key}".encode():
                await _json(send, 401, _err("bad key", "authentication_error", None, "invalid_api_key"))
                return
        if method == "GET" and path == "/health":  # vLLM, SGLang, TGI and llama.cpp all answer this
            await _json(send, 200, {})
            return
        if method == "GET" and path == "/v1/models":
            await _json(send, 200, {"object": "list", "data": [{"id": "fake", "object": "model", "owned_by": "test"}]})
            return
        if method != "POST" or path not in ("/v1/chat/completions", "/v1/completions"):
            await _json(send, 404, _err("no such route", "invalid_request_error", None, None))
            return
        body = await read_body(receive)
        req = orjson.loads(body)
        self.requests.append(req)
        await self._generate(req, path.endswith("chat/completions"), receive, send)

    async def _generate(self, req: dict[str, Any], chat: bool, receive: Any, send: Any) -> None:
        cfg = dict(self.defaults)
        for part in str(req.get("user") or "").replace(",", ";").split(";"):
            if "=" in part:
                key, value = part.split("=", 1)
                cfg[key.strip()] = float(value)
        if self.fail_next:
            cfg["fail"] = self.fail_next.pop(0)
        if "fail" in cfg:
            status = int(cfg["fail"])
            headers = [(b"retry-after", b"2")] if status == 429 else []
            body = _err(f"upstream says {status}", "invalid_request_error" if status < 500 else "server_error",
                        "temperature" if status == 400 else None, "bad_value" if status == 400 else None)
            await _json(send, status, body, headers)
            return
        stream_task = asyncio.ensure_future(self._respond(req, chat, cfg, send))
        watch = asyncio.ensure_future(_until_disconnect(receive))
        done, _ = await asyncio.wait((stream_task, watch), return_when=asyncio.FIRST_COMPLETED)
        if watch in done:
            stream_task.cancel()
            self.cancelled += 1
            self.cancelled_users.append(str(req.get("user") or ""))
            self.cancelled_requests.append(req)
            self.cancelled_event.set()
            await asyncio.gather(stream_task, return_exceptions=True)
            return
        watch.cancel()
        exc = stream_task.exception()
        if exc is not None:
            raise exc
        self.completed += 1
        self.completed_requests.append(req)

    async def _respond(self, req: dict[str, Any], chat: bool, cfg: dict[str, float], send: Any) -> None:
        n = int(req.get("n") or 1)
        max_tokens = req.get("max_completion_tokens") or req.get("max_tokens") or 10**9
        count = int(min(cfg["tokens"], max_tokens))
        finish = "length" if count == max_tokens else "stop"
        want_lp = bool(req.get("logprobs")) if chat else req.get("logprobs") is not None
        top = int(req.get("top_logprobs") or 0) if chat else int(req.get("logprobs") or 0)
        rid, created, model = f"up-{time.time_ns()}", int(time.time()), req.get("model", "fake")
        prompt_tokens = len(orjson.dumps(req.get("messages") or req.get("prompt"))) // 4
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": count * n, "total_tokens": prompt_tokens + count * n}
        if not req.get("stream"):
            choices = []
            for i in range(n):
                text = "".join(f" t{k}" for k in range(count))
                lps = [_logprob(f" t{k}", top) for k in range(count)] if want_lp else None
                if chat:
                    choices.append({"index": i, "message": {"role": "assistant", "content": text},
                                    "logprobs": {"content": lps} if lps else None, "finish_reason": finish})
                else:
                    choices.append({"index": i, "text": text, "logprobs": _legacy(lps), "finish_reason": finish})
            obj = "chat.completion" if chat else "text_completion"
            await _json(send, 200, {"id": rid, "object": obj, "created": created, "model": model,
                                    "choices": choices, "usage": usage})
            return
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/event-stream")]})
        obj = "chat.completion.chunk" if chat else "text_completion"

        async def event(choices: list[dict[str, Any]], extra: dict[str, Any] | None = None) -> None:
            payload = {"id": rid, "object": obj, "created": created, "model": model, "choices": choices, **(extra or {})}
            await send({"type": "http.response.body", "body": b"data: " + orjson.dumps(payload) + b"\n\n", "more_body": True})

        if cfg.get("stall"):
            await asyncio.Event().wait()
        if chat:
            await event([{"index": i, "delta": {"role": "assistant", "content": ""}, "finish_reason": None} for i in range(n)])
        for k in range(count):
            if cfg.get("delay"):
                await asyncio.sleep(cfg["delay"])
            if "cut" in cfg and k == int(cfg["cut"]):
                raise CutConnection()
            if "error_after" in cfg and k == int(cfg["error_after"]):
                err = _err("upstream failed mid-stream", "server_error", None, None)
                await send({"type": "http.response.body", "body": b"data: " + orjson.dumps(err) + b"\n\n", "more_body": False})
                return
            tok = f" t{k}"
            lp = [_logprob(tok, top)] if want_lp else None
            if chat:
                choices = [{"index": i, "delta": {"content": tok}, "logprobs": {"content": lp} if lp else None,
                            "finish_reason": None} for i in range(n)]
            else:
                choices = [{"index": i, "text": tok, "logprobs": _legacy(lp), "finish_reason": None} for i in range(n)]
            if req.get("return_token_ids"):  # vLLM: token ids per chunk, the prompt's on the first
                for c in choices:
                    c["token_ids"] = [100 + k]
                    if k == 0:
                        c["prompt_token_ids"] = [1, 2, 3]
            await event(choices)
        if chat:
            await event([{"index": i, "delta": {}, "finish_reason": finish} for i in range(n)])
        else:
            await event([{"index": i, "text": "", "finish_reason": finish} for i in range(n)])
        if (req.get("stream_options") or {}).get("include_usage"):
            await event([], {"usage": usage})
        await send({"type": "http.response.body", "body": b"data: [DONE]\n\n", "more_body": False})


def _logprob(tok: str, top: int) -> dict[str, Any]:
    alts = [{"token": tok, "logprob": -0.25, "bytes": list(tok.encode())}]
    alts += [{"token": f" alt{j}", "logprob": -2.0 - j, "bytes": list(f" alt{j}".encode())} for j in range(top - 1)]
    return {"token": tok, "logprob": -0.25, "bytes": list(tok.encode()), "top_logprobs": alts[:top]}


def _legacy(lps: list[dict[str, Any]] | None) -> dict[str, Any] | None:
    if not lps:
        return None
    return {"tokens": [x["token"] for x in lps], "token_logprobs": [x["logprob"] for x in lps],
            "top_logprobs": [{t["token"]: t["logprob"] for t in x["top_logprobs"]} for x in lps],
            "text_offset": [0] * len(lps)}


def _err(message: str, etype: str, param: str | None, code: str | None) -> dict[str, Any]:
    return {"error": {"message": message, "type": etype, "param": param, "code": code}}


async def _json(send: Any, status: int, obj: Any, headers: list[tuple[bytes, bytes]] | None = None) -> None:
    body = orjson.dumps(obj)
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), *(headers or [])]})
    await send({"type": "http.response.body", "body": body})


async def _until_disconnect(receive: Any) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


def main() -> None:
    import uvicorn

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8001)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--delay", type=float, default=0.0)
    args = ap.parse_args()
    uvicorn.run(FakeUpstream(args.tokens, args.delay), host=args.host, port=args.port, loop="uvloop",
                http="httptools", log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
