"""HTTP/1.0 clients get close-delimited bodies, never chunked ones.

uvicorn's httptools protocol frames every response without a ``content-length`` (each SSE stream)
with ``transfer-encoding: chunked``, whatever the request's version. An HTTP/1.0 client does not
know chunked coding and reads the chunk sizes as part of the body (``curl --http1.0``, ApacheBench,
old proxies); RFC 9112 §6.1 says a server must not send it to one. HTTP/1.0 has its own framing:
no length, and the server closes the connection at the end (uvicorn already closes every HTTP/1.0
connection). ``close_delimited`` wraps one request cycle's ASGI ``send`` to answer that way.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from uvicorn.protocols.http.httptools_impl import RequestResponseCycle

Send = Callable[[Any], Awaitable[None]]


def close_delimited(cycle: RequestResponseCycle) -> Send:
    """``cycle``'s send, except that a response without ``content-length`` goes out unframed.

    The cycle's own fields say how it frames the body: ``chunked_encoding`` False before the start
    keeps uvicorn from adding the header, and each body message is announced as the length still
    expected so uvicorn's length check passes and ends at zero."""
    send = cycle.send
    unframed = False

    async def send_close_delimited(message: Any) -> None:
        nonlocal unframed
        if message["type"] == "http.response.start":
            headers = message.get("headers") or ()
            if not any(name.lower() in (b"content-length", b"transfer-encoding") for name, _ in headers):
                unframed = True
                cycle.chunked_encoding = False
                cycle.keep_alive = False  # the close ends the body
        elif unframed and message["type"] == "http.response.body":
            cycle.expected_content_length = len(message.get("body", b""))
        await send(message)

    return send_close_delimited
