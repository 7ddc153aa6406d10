"""Per-request timing record: what every sink (metrics, spans, the JSON log, the dashboard) reads.

One ``RequestTrace`` lives for one HTTP generation request. Layers add to it as the request
passes (stage timings, cache outcome, chosen backend); the delta path adds one timestamp per
delta. Nothing is exported while the request runs: sinks read the record once it finishes,
after the last byte went out, so the hot path pays for a few ``perf_counter()`` calls only.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

# nginx's code for "the client closed the connection before the response was complete": the status
# a request that lost its client is recorded with (a label, never sent: nobody is there to read it).
CLIENT_CLOSED = 499


@dataclass(slots=True)
class StageTiming:
    name: str
    start: float  # time.perf_counter() at the start of the stage
    seconds: float


@dataclass(slots=True)
class RequestTrace:
    """Everything measured about one request; ``perf_counter`` times, plus one wall-clock anchor."""

    route: str  # the API endpoint: "chat" | "completions" | "responses"
    start: float = field(default_factory=time.perf_counter)
    start_ns: int = field(default_factory=time.time_ns)  # wall clock, for span timestamps
    request_id: str = ""
    model: str = ""
    backend: str = ""
    tier: str = "default"
    key_id: str | None = None
    traceparent: str | None = None  # the client's W3C trace context, when it sent one
    # "exact" | "semantic" | "miss"; "none" while no cache layer has spoken.
    cache: str = "none"
    stages: list[StageTiming] = field(default_factory=list)
    backend_start: float | None = None  # when the request was handed to the backend
    first_token: float | None = None
    last_token: float | None = None
    itl: list[float] = field(default_factory=list)  # seconds between consecutive deltas
    prompt_tokens: int = 0
    completion_tokens: int = 0
    deltas: int = 0  # output-carrying deltas (the token count when a backend reports no usage)
    cached_tokens: int = 0
    finish_reason: str | None = None
    status: int = 200
    error_type: str | None = None
    end: float | None = None
    # Sampling request attributes (for GenAI span attributes).
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    # Only filled when prompt/output logging is enabled (see ``RequestLogger``).
    prompt: Any = None
    output: list[str] | None = None
    attributes: dict[str, str] = field(default_factory=dict)
    # Events counted by layers during the request: (event, labels), see ``blink.obs.stages``.
    events: list[tuple[str, dict[str, str]]] = field(default_factory=list)

    def add_stage(self, name: str, start: float, seconds: float) -> None:
        self.stages.append(StageTiming(name, start, seconds))

    def on_delta(self, text: str, has_tokens: bool) -> None:
        """Stamp one delta that carried output (text or token ids)."""
        if not (text or has_tokens):
            return
        now = time.perf_counter()
        self.deltas += 1
        if self.first_token is None:
            self.first_token = now
        elif self.last_token is not None:
            self.itl.append(now - self.last_token)
        self.last_token = now
        if self.output is not None:
            self.output.append(text)

    # -- derived figures (seconds) ------------------------------------------------------------

    @property
    def ttft(self) -> float | None:
        return None if self.first_token is None else self.first_token - self.start

    @property
    def e2e(self) -> float:
        return (self.end if self.end is not None else time.perf_counter()) - self.start

    @property
    def queue_time(self) -> float | None:
        return None if self.backend_start is None else self.backend_start - self.start

    @property
    def tpot(self) -> float | None:
        """Mean time per output token after the first (vLLM's definition)."""
        if self.first_token is None or self.last_token is None or self.completion_tokens < 2:
            return None
        return (self.last_token - self.first_token) / (self.completion_tokens - 1)

    @property
    def tokens_per_s(self) -> float | None:
        e2e = self.e2e
        return self.completion_tokens / e2e if e2e > 0 and self.completion_tokens else None
