"""``blink usage``: spend per API key and model from the cost ledger (a rich table)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from blink.config.settings import ConfigError, load_settings
from blink.gateway.cost.ledger import USAGE_COLUMNS, current_month, read_usage


def usage(
    month: Annotated[str | None, typer.Option(help="Month YYYY-MM (default: this month).")] = None,
    all_months: Annotated[bool, typer.Option("--all", help="Every month recorded.")] = False,
    config: Annotated[Path | None, typer.Option(help="YAML config file (for cost.path).")] = None,
    db: Annotated[str | None, typer.Option("--db", help="Usage database (default: cost.path).")] = None,
) -> None:
    """Requests, tokens, cost and savings (cache hits, prompt compression) by API key and model."""
    from rich.console import Console
    from rich.table import Table

    if db is None:
        try:
            db = load_settings(config).cost.path
        except ConfigError as exc:
            typer.echo(str(exc), err=True)
            raise typer.Exit(2) from None
    wanted = None if all_months else (month or current_month())
    rows = [r for r in read_usage(db) if wanted is None or r[0] == wanted]
    table = Table(title=f"Blink usage ({'all months' if wanted is None else wanted})")
    for name in ("month", "key", "model", *USAGE_COLUMNS):
        table.add_column(name, justify="left" if name in ("month", "key", "model") else "right")
    total_cost = total_saved = 0.0
    for row in rows:
        values = dict(zip(("month", "key", "model", *USAGE_COLUMNS), row, strict=True))
        total_cost += float(values["cost_usd"])  # type: ignore[arg-type]
        total_saved += float(values["saved_usd"])  # type: ignore[arg-type]
        table.add_row(*(f"{v:.6f}" if isinstance(v, float) else str(v) for v in values.values()))
    Console().print(table)
    # saved_usd counts cache hits and the input tokens prompt compression removed (README, "Cost").
    typer.echo(f"total cost ${total_cost:.6f}, saved (cache hits, prompt compression) ${total_saved:.6f}")
