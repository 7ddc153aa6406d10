"""A real OpenAI-compatible chat upstream that streams the text after ``say:`` in the last user turn,
one word per SSE chunk (so the safety filter sees a sentence arrive in pieces). Underscores become
spaces, so an answer can hold a phrase that the prompt does not (``forbidden_fruit``)."""

from __future__ import annotations

import re
import time
from typing import Any

import orjson
from asgi_parts import read_body, serve_lifespan


class ScriptedUpstream:
    def __init__(self) -> None:
        self.requests = 0
        self.base_url = ""

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await serve_lifespan(receive, send)
            return
        body = await read_body(receive)
        req = orjson.loads(body)
        self.requests += 1
        last = str(req["messages"][-1]["content"])
        text = last.split("say:", 1)[1].strip().replace("_", " ") if "say:" in last else "ok."
        words = re.findall(r"\S+\s*", text)
        base = {"id": f"up-{time.time_ns()}", "created": int(time.time()), "model": req.get("model", "fake")}
        usage = {"prompt_tokens": 5, "completion_tokens": len(words), "total_tokens": 5 + len(words)}
        if not req.get("stream"):
            choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
            out = orjson.dumps({**base, "object": "chat.completion", "choices": [choice], "usage": usage})
            await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
            await send({"type": "http.response.body", "body": out})
            return
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})

        async def event(delta: dict[str, Any], finish: str | None = None, extra: dict[str, Any] | None = None) -> None:
            payload = {**base, "object": "chat.completion.chunk",
                       "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **(extra or {})}
            await send({"type": "http.response.body", "body": b"data: " + orjson.dumps(payload) + b"\n\n", "more_body": True})

        await event({"role": "assistant", "content": ""})
        for w in words:
            await event({"content": w})
        await event({}, "stop", {"usage": usage})
        await send({"type": "http.response.body", "body": b"data: [DONE]\n\n", "more_body": False})
