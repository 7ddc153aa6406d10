"""What it takes to generate an entry again: the request body and the key it ran as."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"


@dataclass(slots=True, frozen=True)
class Recipe:
    """``key_id`` None: API keys were off, the request ran anonymously and so will the job.

    Only the key's id is kept: the job resolves the key as it is then, so a key revoked or
    narrowed since runs nothing it may no longer run.
    """

    key_id: str | None
    endpoint: str
    body: dict[str, Any]
    # Tokens the original generation took (prompt + completion): the job's budget estimate.
    tokens: int
