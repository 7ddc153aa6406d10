"""Which failures before the first token may be retried elsewhere, and how many times.

A retry is only transparent before the first token: after it the client has seen text.
Connection errors, timeouts, 5xx and 429 say "this replica, now" — another replica or tier may
well answer. A 4xx says "this request" and would fail anywhere, so it goes straight back.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from blink.protocol.errors import BlinkError, InvalidRequestError

# Statuses of an upstream client error that another replica may not repeat.
_RETRYABLE_CLIENT_STATUSES = frozenset({408, 409, 425, 429})


@dataclass(slots=True)
class RetryPolicy:
    # Tries in all (the first one included): one per replica of a typical 2-3 replica tier plus a tier.
    max_attempts: int = 3
    # Do not start an attempt with less than this left before the deadline: it could not finish.
    min_remaining_s: float = 0.05

    def retryable(self, err: BaseException) -> bool:
        if isinstance(err, InvalidRequestError):
            return False
        if isinstance(err, BlinkError):
            return err.status >= 500 or err.status in _RETRYABLE_CLIENT_STATUSES
        # Anything unexpected from a backend (a bug, a protocol surprise) is that backend's fault.
        return isinstance(err, Exception)

    def may_try(self, attempts_done: int, deadline: float | None) -> bool:
        if attempts_done >= self.max_attempts:
            return False
        return deadline is None or deadline - time.monotonic() > self.min_remaining_s
