"""Deletes expired Batch API files in the background, so stored files cannot grow without bound.

An expired file is already 404 for every reader (the store hides it); the sweep frees its bytes
(and its tenant's quota) every ``interval_s``. Several gateway replicas sharing one store may
all sweep: deleting an already deleted file is a no-op.
"""

from __future__ import annotations

import asyncio
import logging
import time

from blink.gateway.batch.store import BatchStore
from blink.tasks import cancel_and_wait

log = logging.getLogger("blink.gateway.batch")


class FileSweeper:
    def __init__(self, store: BatchStore, interval_s: float) -> None:
        self._store = store
        self._interval_s = interval_s
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._loop(), name="blink-batch-file-sweeper")

    async def aclose(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None

    async def sweep(self) -> int:
        """Delete the files expired by now; the number deleted."""
        deleted = await self._store.delete_expired_files(int(time.time()))
        if deleted:
            log.info("deleted %d expired batch files", deleted)
        return deleted

    async def _loop(self) -> None:
        while True:
            try:
                await self.sweep()
            except asyncio.CancelledError:
                raise
            except Exception:  # a store outage: try again next round, never kill the loop
                log.exception("batch file sweep failed; retrying")
            await asyncio.sleep(self._interval_s)
