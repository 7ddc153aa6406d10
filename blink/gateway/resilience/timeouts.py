"""Per-request time limits on a delta stream: first-token timeout, inter-token stall, deadline.

Each ``next`` waits at most the smaller of its own limit and what is left of the deadline, so a
stalled upstream can never hold a request past it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

from blink.backends.base import Delta
from blink.protocol.errors import BackendTimeoutError


@dataclass(slots=True)
class StreamTimeouts:
    # No first token in this long: the replica is stuck; try another (a cold 7B prefill of 8k
    # tokens on a GPU is ~1-2 s, so 10 s is generous yet well inside a 600 s request timeout).
    first_token_s: float | None = 10.0
    # No new delta in this long after the first: the stream stalled (10x a slow 100 ms ITL).
    stall_s: float | None = 5.0


class FirstTokenTimeout(BackendTimeoutError):
    """The backend sent no first token in time (retryable on another replica)."""


class StallTimeout(BackendTimeoutError):
    """The backend stopped sending mid-stream."""


class DeadlineExceeded(BackendTimeoutError):
    """The request's own deadline passed."""


def remaining(deadline: float | None) -> float | None:
    return None if deadline is None else deadline - time.monotonic()


async def next_delta(it: AsyncIterator[Delta], limit_s: float | None, deadline: float | None, first: bool) -> Delta:
    """``anext(it)`` within ``limit_s`` and the deadline; raises the matching timeout error."""
    left = remaining(deadline)
    wait = limit_s if left is None else (left if limit_s is None else min(limit_s, left))
    if wait is None:
        return await anext(it)
    try:
        async with asyncio.timeout(max(wait, 0.0)):
            return await anext(it)
    except TimeoutError:
        if left is not None and (limit_s is None or left <= limit_s):
            raise DeadlineExceeded("The request's deadline passed before the backend answered.") from None
        if first:
            raise FirstTokenTimeout(f"No first token within {limit_s:g} s.") from None
        raise StallTimeout(f"The stream stalled: no token for {limit_s:g} s.") from None
