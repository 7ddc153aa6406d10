"""Per-key concurrent-sequence quota: one key cannot hold more engine sequences than it was given.

A request with ``n`` choices is ``n`` sequences in the engine; a key that opens many long
streams (or one ``n=128`` request) would otherwise take every slot from every other tenant.
The quota is in-process (each gateway replica counts its own in-flight work, like the
concurrency limit): a lease is taken at admission and given back when the response ends,
however it ends (completed, failed, aborted by a disconnect, replayed from the cache).
"""

from __future__ import annotations

from blink.gateway.auth.keys import ApiKey
from blink.protocol.errors import RateLimitError

# A refused client retries after a second: streams end all the time, a slot soon frees up.
_RETRY_AFTER_S = "1"


class SequenceLease:
    """``n`` sequences held by one key until ``release`` (idempotent: every end path may call it)."""

    __slots__ = ("_counts", "_key_id", "_n")

    def __init__(self, counts: dict[str, int] | None, key_id: str, n: int) -> None:
        self._counts = counts
        self._key_id = key_id
        self._n = n

    def release(self) -> None:
        counts = self._counts
        if counts is None:
            return
        self._counts = None
        left = counts.get(self._key_id, 0) - self._n
        if left > 0:
            counts[self._key_id] = left
        else:
            counts.pop(self._key_id, None)


# Handed out when no quota applies: releasing it does nothing.
NO_LEASE = SequenceLease(None, "", 0)


class SequenceQuota:
    def __init__(self, default_per_key: int) -> None:
        # Applies to keys whose own ``max_sequences`` is 0; 0 here turns the default off.
        self.default_per_key = default_per_key
        self._in_flight: dict[str, int] = {}

    def limit_for(self, key: ApiKey) -> int:
        return key.max_sequences or self.default_per_key

    def in_flight(self, key_id: str) -> int:
        return self._in_flight.get(key_id, 0)

    def acquire(self, key: ApiKey | None, n: int) -> SequenceLease:
        """Hold ``n`` sequences for ``key``, or raise 429 ``too_many_sequences``.

        Anonymous traffic (API keys off) is one shared identity, bounded by the server's
        concurrency limit instead: a per-key default there would cap the whole server.
        """
        if key is None:
            return NO_LEASE
        limit = self.limit_for(key)
        if limit <= 0:
            return NO_LEASE
        held = self._in_flight.get(key.key_id, 0)
        if held + n > limit:
            raise RateLimitError(
                f"This API key may run at most {limit} sequences at once; {held} are running and this "
                f"request asks for {n} (each of 'n' choices is one sequence). Retry when some finish.",
                param="n" if n > limit else None, code="too_many_sequences",
                headers={"retry-after": _RETRY_AFTER_S},
            )
        self._in_flight[key.key_id] = held + n
        return SequenceLease(self._in_flight, key.key_id, n)
