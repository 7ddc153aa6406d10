"""Cost accounting (``cost:``): prices per model, spend counters, monthly budgets."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class ModelPrice(BaseModel):
    """USD per 1M tokens, as providers publish them."""

    model_config = ConfigDict(extra="forbid")

    input: float = Field(0.0, ge=0.0)
    output: float = Field(0.0, ge=0.0)
    # Prompt tokens served from the prefix/prompt cache; None = billed at the input price.
    cached_input: float | None = Field(None, ge=0.0)


class CostSettings(BaseModel):
    """Prices per model, per-key spend counters and optional monthly budgets."""

    model_config = ConfigDict(extra="forbid")

    prices: dict[str, ModelPrice] = Field(default_factory=dict)
    # Where spend counters persist (SQLite, WAL); "" keeps them in memory only.
    path: str = "~/.blink/usage.db"
    # Monthly budget in USD per key id ("*" = every key without its own entry); absent = none.
    budgets: dict[str, float] = Field(default_factory=dict)
