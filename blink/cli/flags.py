"""What the sub-commands share about their flags."""

from __future__ import annotations

from typing import Any


def given(**values: Any) -> dict[str, Any]:
    """The flags the user set: typer gives ``None`` for the rest, and settings must not see them."""
    return {k: v for k, v in values.items() if v is not None}
