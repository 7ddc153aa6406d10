"""``/v1/responses`` settings: where stored responses live and how long and how much is kept."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class ResponsesSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    store: Literal["sqlite", "postgres"] = "sqlite"
    path: str = "~/.blink/responses.db"
    postgres_dsn: str | None = None
    # How long a stored response (and so a conversation's turn) is kept; OpenAI keeps them 30 days.
    ttl_s: int = Field(30 * 24 * 3600, ge=1)
    # Bytes of stored responses one tenant may keep: past it, its oldest are evicted (store.py).
    # 1 GiB is tens of thousands of long agent turns; None = no cap.
    storage_budget_bytes: int | None = Field(1024**3, ge=1)
    # Turns ``previous_response_id`` may replay: far beyond an agent's conversation, and a bound
    # on the reads one request can cause.
    max_chain: int = Field(1000, ge=1)
