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
    # Stored responses are written behind, in batches, this often (write_behind.py): a crash loses
    # at most this much of them, and 50 ms of traffic makes batches that keep a commit per response
    # off the bill. None: each reply's last event waits for its batch's commit; the default with
    # ``store: postgres``, where the next turn may land on another replica that reads the database.
    write_behind_s: float | None = Field(0.05, ge=0.0, le=10.0)

    def flush_interval_s(self) -> float | None:
        """``write_behind_s`` as set, or its default for the chosen store (None for postgres)."""
        if self.store == "postgres" and "write_behind_s" not in self.model_fields_set:
            return None
        return self.write_behind_s
