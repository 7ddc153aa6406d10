"""Prices per model -> the cost of one request, and the error a spent budget raises.

Providers price per 1M tokens, split into fresh input, cached input and output; a model with no
configured price costs nothing here (it is still counted in tokens).
"""

from __future__ import annotations

from dataclasses import dataclass

from blink.backends.base import Usage
from blink.config.cost import ModelPrice
from blink.protocol.errors import RateLimitError

_PER = 1_000_000  # prices are quoted per 1M tokens


class BudgetExceededError(RateLimitError):
    """A key spent its monthly budget: 429 like a rate limit, with its own type and code."""

    type = "budget_exceeded"
    code = "budget_exceeded"


@dataclass(slots=True, frozen=True)
class PriceTable:
    prices: dict[str, ModelPrice]

    def cost_usd(self, model: str, usage: Usage) -> float:
        price = self.prices.get(model)
        if price is None:
            return 0.0
        cached = min(usage.cached_tokens, usage.prompt_tokens)
        cached_price = price.input if price.cached_input is None else price.cached_input
        return ((usage.prompt_tokens - cached) * price.input + cached * cached_price
                + usage.completion_tokens * price.output) / _PER


def format_usd(cost: float) -> str:
    """Fixed-point with micro-dollar resolution: a tiny model's request costs fractions of a cent."""
    return f"{cost:.8f}"
