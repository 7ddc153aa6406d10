"""Cost accounting on the request path: budget check at admission, cost after the response.

``check`` runs with the rate limit (429 ``budget_exceeded`` once a key's month is spent);
``charge`` runs after a response was delivered (interactive or batch line) and records tokens,
USD and the ``cost_usd`` field of the request log; a cache hit costs nothing and records what
the backend would have charged as savings. Also an app service: the ledger opens and flushes
with the app.
"""

from __future__ import annotations

import calendar
from datetime import UTC, datetime

from blink.backends.base import Usage
from blink.config.cost import CostSettings
from blink.gateway.cost.ledger import SpendLedger, UsageRow
from blink.gateway.cost.prices import BudgetExceededError, PriceTable, format_usd
from blink.gateway.http.dispatch import Routes
from blink.obs import annotate

COST_HEADER = b"x-blink-cost-usd"
# Budget entry that applies to every key without its own.
_ANY_KEY = "*"


class CostTracker:
    def __init__(self, settings: CostSettings, ledger: SpendLedger | None = None) -> None:
        self.prices = PriceTable(dict(settings.prices))
        self.budgets = dict(settings.budgets)
        self.ledger = ledger or SpendLedger(settings.path or None)
        self.router = Routes()  # no endpoints: an app service for its lifecycle (the ledger)
        self.body_limits: dict[str, int] = {}

    async def start(self) -> None:
        await self.ledger.start()

    async def aclose(self) -> None:
        await self.ledger.aclose()

    def check(self, key_id: str) -> None:
        budget = self.budgets.get(key_id, self.budgets.get(_ANY_KEY))
        if budget is None:
            return
        spent = self.ledger.month_spend(key_id)
        if spent >= budget:
            raise BudgetExceededError(
                f"This key has spent ${spent:.4f} of its ${budget:.4f} monthly budget.",
                headers={"retry-after": str(_seconds_to_month_end())},
            )

    def cost(self, model: str, usage: Usage | None) -> float:
        return 0.0 if usage is None else self.prices.cost_usd(model, usage)

    def header(self, model: str, usage: Usage | None) -> list[tuple[bytes, bytes]]:
        return [(COST_HEADER, format_usd(self.cost(model, usage)).encode())]

    def charge(self, key_id: str, model: str, usage: Usage | None, compressed_tokens: int = 0) -> float:
        """Records what the answer cost; ``compressed_tokens`` that prompt compression kept from
        the upstream count as saved, at the model's input price."""
        cost = self.cost(model, usage)
        u = usage or Usage()
        saved = self.prices.cost_usd(model, Usage(prompt_tokens=compressed_tokens)) if compressed_tokens else 0.0
        self.ledger.record(key_id, model, UsageRow(requests=1, prompt_tokens=u.prompt_tokens,
                                                   completion_tokens=u.completion_tokens,
                                                   cached_tokens=u.cached_tokens, cost_usd=cost,
                                                   saved_usd=saved))
        annotate(cost_usd=format_usd(cost))
        return cost

    def cache_hit(self, key_id: str, model: str, prompt_tokens: int, completion_tokens: int) -> list[tuple[bytes, bytes]]:
        saved = self.prices.cost_usd(model, Usage(prompt_tokens, completion_tokens))
        self.ledger.record(key_id, model, UsageRow(requests=1, cache_hits=1, saved_usd=saved))
        annotate(cost_usd=format_usd(0.0))
        return [(COST_HEADER, format_usd(0.0).encode())]


def _seconds_to_month_end(now: datetime | None = None) -> int:
    now = now or datetime.now(UTC)
    days = calendar.monthrange(now.year, now.month)[1]
    end = now.replace(day=days, hour=23, minute=59, second=59, microsecond=0)
    return max(1, int((end - now).total_seconds()) + 1)


def build_cost_tracker(settings: CostSettings) -> CostTracker | None:
    """None (no work on the request path) unless prices or budgets are configured."""
    if not (settings.prices or settings.budgets):
        return None
    return CostTracker(settings)
