"""Stored responses written behind: the reply never waits on the database, reads never miss a write.

``put`` encodes the response (its size decides the budget at once) and queues it; a background
task writes the queue every ``flush_s`` as one batch (``SqlResponseStore.put_many``: one
transaction on a worker thread, one expiry sweep, one budget sum per tenant). Until its batch is
committed a response is served from the queue, so ``GET /v1/responses/{id}``, ``input_items`` and
``previous_response_id`` find it the moment its reply ended, on this gateway.

Crash safety, plainly: a response is durable once its batch commits, at most ``flush_s`` (plus one
write) after its reply. A graceful stop (``aclose``) writes everything queued; a crash or a kill
loses the queued responses (their clients got their answers; a later ``GET`` or continuation of
them is a 404). A batch that fails to write is logged and lost the same way. Another gateway
replica sharing a PostgreSQL store sees a response only once it is committed: with ``flush_s`` None
each reply's last event waits for its batch's commit instead (group commit: concurrent replies
still share one transaction), which is what a turn that may land on any replica needs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from blink.gateway.responses.store import PendingWrite, SqlResponseStore, StoredResponse, encode

log = logging.getLogger("blink.gateway")

# Queued responses past which ``put`` waits for a write instead of queueing more: the queue stays
# bounded when the disk cannot keep up (about a second of the fastest stored-response traffic).
MAX_PENDING = 4096


class WriteBehindResponseStore:
    def __init__(self, inner: SqlResponseStore, flush_s: float | None) -> None:
        self._inner = inner
        self._flush_s = flush_s
        self._pending: dict[str, PendingWrite] = {}
        self._flushing: dict[str, PendingWrite] = {}  # the batch being written: still read from here
        self._waiters: list[asyncio.Future[None]] = []  # replies waiting for the pending batch's commit
        self._wake = asyncio.Event()
        self._lock = asyncio.Lock()  # one batch at a time; delete waits for the batch in flight
        self._task: asyncio.Task[None] | None = None
        self._closing = asyncio.Event()  # set by aclose: cuts the wait for a batch short

    async def start(self) -> None:
        await self._inner.start()
        if self._task is None:
            self._closing.clear()
            self._task = asyncio.create_task(self._flush_loop(), name="blink-responses-write-behind")

    async def aclose(self) -> None:
        if self._task is not None:
            self._closing.set()
            self._wake.set()
            await self._task
            self._task = None
        await self.flush()
        await self._inner.aclose()

    async def put(self, rec: StoredResponse, budget_bytes: int | None) -> bool:
        w = encode(rec, budget_bytes)
        if w is None:
            return False
        if self._task is None:  # not started or closed: nothing would flush a queue
            await self._inner.put_many([w])
            return True
        self._pending[rec.id] = w
        self._wake.set()
        if self._flush_s is None:
            done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.append(done)
            await done
        elif len(self._pending) >= MAX_PENDING:
            await self.flush()
        return True

    async def get(self, response_id: str) -> StoredResponse | None:
        w = self._queued(response_id)
        if w is None:
            return await self._inner.get(response_id)
        return w.decoded() if _live(w, int(time.time())) else None

    async def chain(self, response_id: str, max_depth: int) -> list[StoredResponse] | None:
        """Queued turns first (the newest are the ones not yet written), then the rest from the database."""
        now = int(time.time())
        newest_first: list[StoredResponse] = []
        next_id: str | None = response_id
        while next_id is not None:
            if len(newest_first) >= max_depth:
                return None
            w = self._queued(next_id)
            if w is None:
                older = await self._inner.chain(next_id, max_depth - len(newest_first))
                return None if older is None else older + newest_first[::-1]
            if not _live(w, now):
                return None
            rec = w.decoded()
            newest_first.append(rec)
            next_id = rec.previous_id
        return newest_first[::-1]

    async def delete(self, response_id: str) -> bool:
        async with self._lock:  # no batch in flight: the id is queued, written, or neither
            queued = self._pending.pop(response_id, None) is not None
            written = await self._inner.delete(response_id)
        return queued or written

    async def tenant_bytes(self, tenant: str | None) -> int:
        await self.flush()
        return await self._inner.tenant_bytes(tenant)

    async def flush(self) -> None:
        """Write everything queued now (one batch). A caller cancelled meanwhile never cuts a batch short."""
        await asyncio.shield(asyncio.ensure_future(self._write_batch()))

    async def _write_batch(self) -> None:
        async with self._lock:
            if not self._pending:
                return
            batch, self._pending = self._pending, {}
            waiters, self._waiters = self._waiters, []
            self._flushing = batch
            try:
                await self._inner.put_many(list(batch.values()))
            except Exception as exc:
                if not waiters:
                    log.exception("lost %d stored responses: their batch failed to write", len(batch))
                for f in waiters:
                    if not f.done():
                        f.set_exception(exc)
            else:
                for f in waiters:
                    if not f.done():
                        f.set_result(None)
            finally:
                self._flushing = {}

    def _queued(self, response_id: str) -> PendingWrite | None:
        return self._pending.get(response_id) or self._flushing.get(response_id)

    async def _flush_loop(self) -> None:
        while True:
            await self._wake.wait()
            if self._flush_s and not self._closing.is_set():
                with contextlib.suppress(TimeoutError):  # gather a batch
                    await asyncio.wait_for(self._closing.wait(), self._flush_s)
            self._wake.clear()
            await self.flush()
            if self._closing.is_set():
                return


def _live(w: PendingWrite, now: int) -> bool:
    return w.rec.expires_at is None or w.rec.expires_at > now
