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


class StallWatch:
    """The inter-token stall limit (and the deadline) for one stream with a single timer.

    ``asyncio.timeout`` per token costs a timer handle per delta; this keeps one, re-armed only
    when it fires early, and cancels the waiting task only while it waits for the backend
    (``waiting``) — never while the delta is being written to a slow client."""

    __slots__ = ("_loop", "_task", "_stall", "_deadline", "_last", "_handle", "waiting", "fired")

    def __init__(self, stall_s: float | None, deadline: float | None) -> None:
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.current_task()
        self._stall = stall_s
        # The deadline on the loop's clock (time.monotonic() and loop.time() may differ in origin).
        self._deadline = None if deadline is None else self._loop.time() + (deadline - time.monotonic())
        self._last = self._loop.time()
        self.waiting = False
        self.fired: BackendTimeoutError | None = None
        due = self._due()
        self._handle = None if due is None or self._task is None else self._loop.call_at(due, self._check)

    def arm(self) -> None:
        self._last = self._loop.time()
        self.waiting = True

    def _due(self) -> float | None:
        stall = None if self._stall is None else self._last + self._stall
        if self._deadline is None:
            return stall
        return self._deadline if stall is None else min(stall, self._deadline)

    def _check(self) -> None:
        now = self._loop.time()
        if self._deadline is not None and now >= self._deadline and self.waiting:
            self.fired = DeadlineExceeded("The request's deadline passed mid-stream.")
        elif self._stall is not None and self.waiting and now >= self._last + self._stall:
            self.fired = StallTimeout(f"The stream stalled: no token for {self._stall:g} s.")
        if self.fired is not None and self._task is not None:
            self._task.cancel()
            return
        if not self.waiting:
            self._last = now  # writing to the client is not a stall: measure from now
        due = self._due()
        self._handle = None if due is None else self._loop.call_at(max(due, now + 1e-3), self._check)

    def close(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
