"""An OpenAI-compatible streaming server whose latencies are known exactly.

The first token leaves ``ttft`` seconds after the request arrived, token k at ``ttft + k * itl``
(scheduled against the arrival time, so sleep overshoot never accumulates). Every
``fail_every``-th request is answered 429.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson


class KnownLatencyServer:
    def __init__(self, ttft: float, itl: float, fail_every: int = 0) -> None:
        self.ttft = ttft
        self.itl = itl
        self.fail_every = fail_every
        self.count = 0
        self.bodies: list[dict[str, Any]] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        if scope["path"] == "/v1/models":
            await _send(send, 200, {"object": "list", "data": [{"id": "known", "object": "model"}]})
            return
        body = b""
        while True:
            msg = await receive()
            body += msg.get("body", b"")
            if not msg.get("more_body"):
                break
        req = orjson.loads(body)
        self.bodies.append(req)
        self.count += 1
        if self.fail_every and self.count % self.fail_every == 0:
            await _send(send, 429, {"error": {"message": "slow down", "type": "rate_limit_error", "code": None}})
            return
        n = int(req.get("max_tokens") or 8)
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
        for k in range(n):
            await asyncio.sleep(max(0.0, t0 + self.ttft + k * self.itl - loop.time()))
            chunk = {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": f" w{k}"}}]}
            await send({"type": "http.response.body", "body": b"data: " + orjson.dumps(chunk) + b"\n\n", "more_body": True})
        usage = {"object": "chat.completion.chunk", "choices": [],
                 "usage": {"prompt_tokens": 10, "completion_tokens": n, "total_tokens": 10 + n}}
        await send({"type": "http.response.body", "body": b"data: " + orjson.dumps(usage) + b"\n\ndata: [DONE]\n\n",
                    "more_body": False})


async def _send(send: Any, status: int, obj: Any) -> None:
    await send({"type": "http.response.start", "status": status, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": orjson.dumps(obj)})


def main() -> None:
    import argparse

    import uvicorn

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--ttft", type=float, required=True)
    ap.add_argument("--itl", type=float, required=True)
    ap.add_argument("--fail-every", type=int, default=0)
    args = ap.parse_args()
    uvicorn.run(KnownLatencyServer(args.ttft, args.itl, args.fail_every), host="127.0.0.1", port=args.port,
                loop="uvloop", http="httptools", log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
