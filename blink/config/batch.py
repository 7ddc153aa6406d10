"""Settings of the Batch API (``batch:``): its job store and runner."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class BatchSettings(BaseModel):
    """``/v1/files`` + ``/v1/batches``: jobs persist in SQLite (default) or PostgreSQL."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = True
    store: Literal["sqlite", "postgres"] = "sqlite"
    path: str = "~/.blink/batch.db"
    postgres_dsn: str | None = None
    # Lines in flight at once: enough to keep spare engine slots full (the default engine runs
    # 64 sequences per step); the scheduler, not this number, keeps batch work out of the way.
    max_concurrency: int = Field(64, ge=1)
    # OpenAI's Batch API caps a file at 200 MB and 50,000 requests.
    max_file_bytes: int = Field(200 * 1024 * 1024, ge=1)
    max_lines: int = Field(50_000, ge=1)
    # Bytes of files (uploads, batch outputs and errors) one tenant may keep; an upload past it
    # is refused (413 ``storage_quota_exceeded``) until files are deleted or expire. None = no cap.
    storage_quota_bytes: int | None = Field(10 * 1024**3, ge=1)
    # How long a file is kept when its upload names no ``expires_after``, and how long batch
    # output/error files are kept (OpenAI keeps batch outputs 30 days). None = until deleted.
    file_retention_s: int | None = Field(30 * 24 * 3600, ge=1)
    # The range OpenAI accepts for ``expires_after.seconds`` (1 hour to 30 days).
    min_expires_after_s: int = Field(3600, ge=1)
    max_expires_after_s: int = Field(30 * 24 * 3600, ge=1)
    # How often expired files are deleted (an expired file is 404 at once; this frees the bytes).
    sweep_interval_s: float = Field(60.0, gt=0)
    # How long one line whose backend was down (503) or whose key was rate-limited (429) keeps
    # being retried, within the batch's completion window, before its error is final.
    line_retry_s: float = Field(3600.0, ge=0)


