"""Incremental parser for ``text/event-stream`` bodies: bytes in, ``data`` payloads out."""

from __future__ import annotations


class SSEParser:
    """Feed network chunks; get back each event's joined ``data:`` lines as bytes.

    Handles events split across chunks, ``\\r\\n`` line ends, comments and multi-line data.
    """

    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = b""

    def feed(self, chunk: bytes) -> list[bytes]:
        buf = self._buf + chunk
        if b"\r" in buf:
            buf = buf.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        events = buf.split(b"\n\n")
        self._buf = events.pop()
        out: list[bytes] = []
        for event in events:
            data = _event_data(event)
            if data is not None:
                out.append(data)
        return out

    def flush(self) -> list[bytes]:
        """The last event when the body ended without a blank line."""
        data = _event_data(self._buf) if self._buf.strip() else None
        self._buf = b""
        return [data] if data is not None else []


def _event_data(event: bytes) -> bytes | None:
    if event.startswith(b"data: ") and b"\n" not in event:  # the common case: one data line
        return event[6:]
    parts = []
    for line in event.split(b"\n"):
        if line.startswith(b"data:"):
            value = line[5:]
            parts.append(value[1:] if value.startswith(b" ") else value)
    return b"\n".join(parts) if parts else None
