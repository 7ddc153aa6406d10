"""A cached response: what a hit replays, as JSON or as an SSE stream."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import orjson


@dataclass(slots=True)
class CachedChoice:
    text: str
    finish_reason: str | None
    tool_calls: list[dict[str, Any]] | None = None


@dataclass(slots=True)
class CachedResponse:
    """One finished generation, enough to replay it with fresh ids.

    ``query`` is the text the semantic cache embedded; the hit guard compares a new request's
    text against it, so a near-miss is rejected even when the vectors are close.
    ``precomputed`` names the idle-lane job that generated it (``refresh`` | ``predict``), empty for
    an answer a user's own request produced: a hit on it is reported and counted as such.
    """

    kind: str
    choices: list[CachedChoice]
    prompt_tokens: int = 0
    completion_tokens: int = 0
    query: str = ""
    created_at: float = field(default_factory=time.time)
    precomputed: str = ""

    def to_bytes(self) -> bytes:
        extra = {"precomputed": self.precomputed} if self.precomputed else {}
        return orjson.dumps(
            {
                **extra,
                "kind": self.kind,
                "choices": [[c.text, c.finish_reason, c.tool_calls] for c in self.choices],
                "usage": [self.prompt_tokens, self.completion_tokens],
                "query": self.query,
                "created_at": self.created_at,
            }
        )

    @classmethod
    def from_bytes(cls, data: bytes) -> CachedResponse:
        obj = orjson.loads(data)
        return cls(
            kind=obj["kind"],
            choices=[CachedChoice(t, f, tc) for t, f, tc in obj["choices"]],
            prompt_tokens=obj["usage"][0],
            completion_tokens=obj["usage"][1],
            query=obj.get("query", ""),
            created_at=obj.get("created_at", 0.0),
            precomputed=obj.get("precomputed", ""),
        )
