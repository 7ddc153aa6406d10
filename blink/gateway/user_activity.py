"""Users' requests in flight, so the server's own background work can stand aside while they run.

Pre-computation (gateway/precompute/) runs in the engine's idle lane, which the engine already
pauses within one step when a user request arrives. Its gateway-side work is a different matter:
building a job's prompt, embedding its question for the cache lookup and the fill, and reading its
stream all run on the same cores as the users' parsing, tokenising and embedding, and the engine
cannot see them. So the pipeline counts every user request from its arrival to the end of its
response, and background work awaits ``quiet`` before each piece of CPU it spends. The window runs
from the latest arrival or end: after a response ends, its own cache fill (an embedding) and the
client's next request of a burst still follow.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


class UserLease:
    """One user request in flight until ``release`` (idempotent: every end path may call it)."""

    __slots__ = ("_activity",)

    def __init__(self, activity: UserActivity | None) -> None:
        self._activity = activity

    def release(self) -> None:
        activity = self._activity
        if activity is None:
            return
        self._activity = None
        activity.ended()


# Handed out for requests that are not a user's (the server's own jobs): releasing it does nothing.
NO_USER = UserLease(None)


class UserActivity:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self.in_flight = 0
        # The latest arrival or end of a user request.
        self.last_active = -float("inf")
        self._idle = asyncio.Event()
        self._idle.set()

    def begin(self) -> UserLease:
        """A user request arrived; it is in flight until the lease is released."""
        self.last_active = self._clock()
        self.in_flight += 1
        self._idle.clear()
        return UserLease(self)

    def ended(self) -> None:
        self.last_active = self._clock()
        self.in_flight = max(0, self.in_flight - 1)
        if self.in_flight == 0:
            self._idle.set()

    def is_quiet(self, hold_s: float) -> bool:
        return self.in_flight == 0 and self._clock() - self.last_active >= hold_s

    async def quiet(self, hold_s: float) -> None:
        """Return once no user request is in flight and none arrived or ended in the last ``hold_s`` seconds."""
        while True:
            if self.in_flight:
                await self._idle.wait()
                continue
            left = hold_s - (self._clock() - self.last_active)
            if left <= 0:
                return
            await asyncio.sleep(left)
