"""Per-key cap on open voice sessions: one key cannot hold every ``/v1/voice`` slot.

The server admits ``voice.max_sessions`` sockets in all, and a session may stay open for
``voice.max_session_s`` (30 minutes by default): without a per-key share, one key opening that many
sockets locks every other tenant out of voice for that long. In-process, like the sequence quota:
each gateway replica counts its own sockets.
"""

from __future__ import annotations

from blink.gateway.auth.keys import ApiKey
from blink.gateway.ratelimit.sequence_quota import NO_LEASE, SequenceLease
from blink.protocol.errors import RateLimitError

# Sessions last minutes: a refused client retries after a few seconds, not at once.
_RETRY_AFTER_S = "5"


class VoiceSessionQuota:
    def __init__(self, default_per_key: int) -> None:
        # Applies to keys whose own ``max_voice_sessions`` is 0; 0 here turns the default off.
        self.default_per_key = default_per_key
        self._open: dict[str, int] = {}

    def open_sessions(self, key_id: str) -> int:
        return self._open.get(key_id, 0)

    def acquire(self, key: ApiKey | None) -> SequenceLease:
        """Hold one session for ``key`` until the lease is released, or raise 429 ``too_many_sessions``.

        Anonymous sessions (API keys off) are one shared identity, bounded by ``voice.max_sessions``.
        """
        if key is None:
            return NO_LEASE
        limit = key.max_voice_sessions or self.default_per_key
        if limit <= 0:
            return NO_LEASE
        held = self._open.get(key.key_id, 0)
        if held >= limit:
            raise RateLimitError(
                f"This API key may hold at most {limit} voice sessions at once and has {held} open; "
                "close one or retry later.",
                code="too_many_sessions", headers={"retry-after": _RETRY_AFTER_S},
            )
        self._open[key.key_id] = held + 1
        return SequenceLease(self._open, key.key_id, 1)
