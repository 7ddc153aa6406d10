"""Background tasks: stop one and wait until it has really stopped.

A service's ``aclose`` must not return while its loop can still touch what it is closing (a
database connection, a store), so it cancels the task and awaits it; the ``CancelledError`` it
ends with is the expected outcome, not a failure.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable


async def cancel_and_wait(tasks: asyncio.Task[None] | Iterable[asyncio.Task[None]] | None) -> None:
    """Cancel ``tasks`` (one, several or None) and wait for each to finish."""
    if tasks is None:
        return
    group = [tasks] if isinstance(tasks, asyncio.Task) else list(tasks)
    for task in group:
        task.cancel()
    for task in group:
        with contextlib.suppress(asyncio.CancelledError):
            await task
