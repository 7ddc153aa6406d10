"""One structured JSON line per finished request, for log shippers (stdout by default).

The API key never appears, only its id. Prompts and outputs are written only when explicitly
enabled, and then pass through PII redaction first.
"""

from __future__ import annotations

import asyncio
import sys
from datetime import UTC, datetime
from typing import IO, Any

import orjson

from blink.obs.redact import redact
from blink.obs.trace import RequestTrace

# Lines written from the event loop wait this long and go out together: one write syscall per
# ~30 requests at 600 req/s instead of one each (stdout is unbuffered under PYTHONUNBUFFERED and
# files are line-buffered, so each line was its own syscall: a visible share of the gateway's CPU
# per request; RESULTS.md, "Figures behind the code's numbers", request_log). 50 ms is far inside
# any log shipper's own batching delay.
_FLUSH_S = 0.05


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000.0, 3)


class RequestLogger:
    def __init__(self, stream: IO[str] | None = None, *, log_prompts: bool = False, redact_pii: bool = True) -> None:
        self._stream = stream if stream is not None else sys.stdout
        self.log_prompts = log_prompts
        self._redact_pii = redact_pii
        self._pending: list[str] = []
        self._flush_at: asyncio.TimerHandle | None = None

    @classmethod
    def to_target(cls, target: str, *, log_prompts: bool = False, redact_pii: bool = True) -> RequestLogger:
        """``stdout``, ``stderr`` or a file path (appended to, line-buffered)."""
        if target == "stdout":
            stream: IO[str] = sys.stdout
        elif target == "stderr":
            stream = sys.stderr
        else:
            stream = open(target, "a", buffering=1, encoding="utf-8")  # noqa: SIM115 - lives as long as the app
        return cls(stream, log_prompts=log_prompts, redact_pii=redact_pii)

    def record(self, t: RequestTrace) -> dict[str, Any]:
        rec: dict[str, Any] = {
            "ts": datetime.fromtimestamp(t.start_ns / 1e9, UTC).isoformat(timespec="milliseconds"),
            "event": "request",
            "request_id": t.request_id,
            "key_id": t.key_id,
            "model": t.model,
            "backend": t.backend,
            "route": t.route,
            "tier": t.tier,
            "cache": t.cache,
            "status": t.status,
            "error": t.error_type,
            "ttft_ms": _ms(t.ttft),
            "total_ms": _ms(t.e2e),
            "queue_ms": _ms(t.queue_time),
            "prompt_tokens": t.prompt_tokens,
            "completion_tokens": t.completion_tokens,
            "tokens_per_s": None if t.tokens_per_s is None else round(t.tokens_per_s, 2),
            "finish_reason": t.finish_reason,
            # Set by cost accounting when prices are configured (USD, 0 for a cache hit).
            "cost_usd": float(t.attributes["cost_usd"]) if "cost_usd" in t.attributes else None,
            "stages_ms": {s.name: _ms(s.seconds) for s in t.stages},
        }
        if self.log_prompts:
            rec["prompt"] = self._clean(orjson.dumps(t.prompt).decode() if not isinstance(t.prompt, str) else t.prompt)
            rec["output"] = self._clean("".join(t.output or ()))
        return rec

    def write(self, t: RequestTrace) -> None:
        line = orjson.dumps(self.record(t)).decode() + "\n"
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no event loop (a script, a test): write at once
            self._stream.write(line)
            return
        self._pending.append(line)
        if self._flush_at is None:
            self._flush_at = loop.call_later(_FLUSH_S, self.flush)

    def flush(self) -> None:
        """Write the lines held back so far (at the timer, and on close)."""
        if self._flush_at is not None:
            self._flush_at.cancel()
            self._flush_at = None
        if self._pending:
            lines = "".join(self._pending)
            self._pending.clear()
            self._stream.write(lines)

    def _clean(self, text: str) -> str:
        return redact(text) if self._redact_pii else text

    def close(self) -> None:
        self.flush()
        if self._stream not in (sys.stdout, sys.stderr):
            self._stream.close()
