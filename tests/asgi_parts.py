"""ASGI plumbing the test servers share: the lifespan handshake and reading a whole body."""

from __future__ import annotations

from typing import Any


async def serve_lifespan(receive: Any, send: Any) -> None:
    """Answer startup (and any repeat) until shutdown, then confirm the shutdown."""
    while (await receive())["type"] != "lifespan.shutdown":
        await send({"type": "lifespan.startup.complete"})
    await send({"type": "lifespan.shutdown.complete"})


async def read_body(receive: Any) -> bytes:
    body = b""
    while True:
        msg = await receive()
        body += msg.get("body", b"")
        if not msg.get("more_body"):
            return body
