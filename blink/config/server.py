"""The HTTP server's settings (``server:``): where it listens and how it bounds requests and connections."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from blink.byte_size import ByteSize


class ServerSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    host: str = "127.0.0.1"
    port: int = Field(8000, ge=0, le=65535)
    # 1 MiB holds a ~250k-character conversation; larger bodies are almost always mistakes.
    max_body_bytes: ByteSize = 1_048_576
    # Generation requests in flight (streamed or not) before new ones get 503 + retry-after. A
    # request takes its slot only once its whole body is in (blink/gateway/http/edge_limits.py).
    max_concurrent_streams: int = Field(256, ge=1)
    # A request head (request line + headers) larger than this gets 431 and the connection closes.
    # 64 KiB holds large cookies and JWTs with room to spare (nginx's default is 4 x 8 KiB, Node's
    # 16 KiB); bytes are counted before the parser sees them, so a bigger head is never parsed.
    max_header_bytes: ByteSize = 65_536
    # Header lines per request before 431 (Apache's LimitRequestFields default is 100).
    max_header_count: int = Field(100, ge=1)
    # A request head must arrive whole within this many seconds of its first byte: 408 and close
    # otherwise, so slow-header connections cannot pile up (a new connection that sends nothing
    # for this long is closed without an answer).
    header_timeout_s: float = Field(10.0, gt=0)
    # A request body must arrive whole within this many seconds of its head: 408 and close
    # otherwise. 30 s lets a 1 MiB body through at ~35 KB/s.
    body_timeout_s: float = Field(30.0, gt=0)
    # After a refused head (431, 408, malformed), the answer is sent, the sending side shut and the
    # connection held this long without reading before it closes: the client reads its answer
    # instead of a reset, and a client that keeps sending waits here instead of opening its next
    # connection at once (closing at once let a header bomb loop as fast as the gateway could
    # accept and read, on the gateway's own core). Held connections count toward
    # max_connections_per_client. 2 s is Apache httpd's SECONDS_TO_LINGER; 0 closes at once.
    refused_linger_s: float = Field(2.0, ge=0)
    # Open connections one client address may hold; a connection over the cap is answered 429 +
    # retry-after and closed at once. 0 = no cap (set it to 0 behind a proxy that hides addresses).
    max_connections_per_client: int = Field(128, ge=0)
    # A response's head leaves with its first body bytes, in one write (one segment and one client
    # wake-up fewer on the first-token path; blink/gateway/http/uvicorn_protocol.py). false: uvicorn's own
    # two writes, the head at once.
    coalesce_writes: bool = True
    # /dashboard/events viewers at once; more get 503 + retry-after (all share one snapshot a second).
    dashboard_max_viewers: int = Field(32, ge=1)
    # Sequences (each of a request's ``n`` choices is one) an API key may run at once, for keys
    # whose own ``max_sequences`` is 0; 0 turns the default off. 64 is one embedded engine's
    # default ``max_num_seqs``: one key alone may fill an idle engine, never more.
    max_sequences_per_key: int = Field(64, ge=0)
    # Who shares the embedded engine's prefix cache when API keys are on. "tenant": only requests of
    # the same tenant (a prefix-cache hit shows in ``cached_tokens`` and in the time to first token,
    # so a shared cache would let one tenant test whether another sent a guessed prompt); "shared":
    # every request (more hits on prompts common to tenants). Without keys there is one tenant.
    prefix_cache_scope: Literal["tenant", "shared"] = "tenant"
    # Upper bound on max_tokens / max_completion_tokens a client may ask for.
    max_tokens_limit: int = Field(32_768, ge=1)
    # Whole-request deadline handed to backends (seconds); None = no deadline.
    request_timeout_s: float | None = Field(600.0, gt=0)
    log_level: Literal["critical", "error", "warning", "info", "debug", "trace"] = "info"
