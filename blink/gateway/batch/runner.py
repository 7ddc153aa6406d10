"""Drives persisted batches to completion in the background, one batch at a time, in order.

On start it resumes whatever the store says is unfinished (a restart after a crash runs only
the lines not yet marked done). Lines run ``max_concurrency`` at a time; the engine scheduler,
not this runner, keeps them out of interactive traffic's way (they carry priority ``batch``).
A cancel stops new lines, drops those in flight, and finalizes with what finished.

A line that failed only for want of capacity (its backend down: 503 ``backend_unavailable`` or
``engine_unavailable``; the server full: 503 ``overloaded``; the rate-limit or key store down: 503
``ratelimit_store_unavailable`` / ``key_store_unavailable``; a rate limit, its key's or an upstream's: 429) is not a result: it
waits with exponential backoff and runs again, for up to ``line_retry_s`` and never past the
batch's completion window, so an engine restart or a tight rate limit slows a batch down
instead of failing it. A spent budget (429 ``budget_exceeded``, or an upstream's
``insufficient_quota``) is final: waiting a minute does not refill it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from dataclasses import dataclass

import orjson

from blink.gateway.batch.executor import LineExecutor, LineResult
from blink.gateway.batch.jsonl import output_line
from blink.gateway.batch.store import BatchRecord, BatchStore, FileRecord, PendingLine
from blink.tasks import cancel_and_wait

# Random bytes in a stored object's id (files, batches) after its time prefix: 96 bits, so an id
# cannot be guessed or enumerated even by a client that has seen many.
STORED_ID_BYTES = 12

log = logging.getLogger("blink.gateway.batch")

# Lines fetched from the store per query: a few rounds of the default concurrency.
_PAGE = 256
# How often an idle runner looks for work it was not told about (another replica's jobs).
_IDLE_POLL_S = 2.0
# A pass that keeps failing (a full disk, a store gone) is retried less and less often, up to this,
# and logged with its traceback once, then one line per _FAILURE_LOG_S: a traceback every poll
# would itself fill the disk that was full.
_MAX_FAILURE_WAIT_S = 60.0
_FAILURE_LOG_S = 300.0
# Error codes of a line that failed only for want of capacity and is run again: 503s by code;
# every 429 but a spent budget (an upstream's rate-limit 429 often carries no code at all).
# A shared store's outage (Redis behind the rate limits, PostgreSQL behind the keys) answers 503 with
# "retry shortly" too: a line refused by one is not a result either.
_RETRYABLE_503 = frozenset({"backend_unavailable", "engine_unavailable", "overloaded", "ratelimit_store_unavailable",
                            "key_store_unavailable"})
_FINAL_429 = frozenset({"budget_exceeded", "insufficient_quota"})


@dataclass(frozen=True, slots=True)
class LineRetry:
    """Backoff for retryable lines. The first wait is short (an engine restart takes seconds);
    the cap is a rate-limit window (keys are limited per minute), so a throttled key's lines
    keep trying about once a window."""

    total_s: float  # ``batch.line_retry_s``
    first_delay_s: float = 0.5
    max_delay_s: float = 60.0


class BatchRunner:
    def __init__(self, store: BatchStore, execute: LineExecutor, max_concurrency: int, retry: LineRetry,
                 output_retention_s: int | None) -> None:
        self._store = store
        self._execute = execute
        self._max_concurrency = max_concurrency
        self._retry = retry
        # Output and error files expire this long after they are written (None: kept until deleted).
        self._output_retention_s = output_retention_s
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._cancelled: set[str] = set()
        self._inflight: dict[str, set[asyncio.Task[None]]] = {}
        self._failures = 0  # passes failed in a row
        self._failure_logged_at = 0.0

    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._loop(), name="blink-batch-runner")

    async def aclose(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None

    def notify(self) -> None:
        """A batch was created: look for work now rather than at the next poll."""
        self._wake.set()

    def cancel(self, batch_id: str) -> None:
        """Stop a running batch's lines now (the status is already ``cancelling`` in the store)."""
        self._cancelled.add(batch_id)
        for task in self._inflight.get(batch_id, ()):
            task.cancel()
        self._wake.set()

    async def _loop(self) -> None:
        while True:
            try:
                batches = await self._store.active_batches()
                for batch in batches:
                    await self._run(batch)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._log_failure(exc)
                batches = []
            else:
                if self._failures:
                    log.info("batch runner recovered after %d failed passes", self._failures)
                self._failures = 0
            if not batches:
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.failure_wait_s()):
                        await self._wake.wait()

    def failure_wait_s(self) -> float:
        """The wait before the next pass: the idle poll, doubled for each pass failed in a row."""
        return min(_IDLE_POLL_S * 2 ** min(self._failures, 16), max(_IDLE_POLL_S, _MAX_FAILURE_WAIT_S))

    def _log_failure(self, exc: Exception) -> None:
        self._failures += 1
        now = time.monotonic()
        if self._failures == 1:
            log.exception("batch runner pass failed; retrying")
            self._failure_logged_at = now
        elif now - self._failure_logged_at >= _FAILURE_LOG_S:
            log.error("batch runner still failing (%d passes in a row): %s: %s", self._failures,
                      type(exc).__name__, exc)
            self._failure_logged_at = now

    async def _run(self, batch: BatchRecord) -> None:
        if batch.status == "validating":
            await self._store.set_status(batch.id, "in_progress", "in_progress_at", only_from=("validating",))
            batch.status = "in_progress"
        if batch.status == "in_progress" and batch.id not in self._cancelled:
            await self._run_lines(batch)
        if batch.id in self._cancelled or batch.status == "cancelling":
            await self._finalize(batch.id, "cancelled", "cancelled_at")
        else:
            current = await self._store.get_batch(batch.id)
            if current is not None and current.status == "cancelling":
                await self._finalize(batch.id, "cancelled", "cancelled_at")
            else:
                await self._store.set_status(batch.id, "finalizing", "finalizing_at", only_from=("in_progress",))
                await self._finalize(batch.id, "completed", "completed_at")
        self._cancelled.discard(batch.id)

    async def _run_lines(self, batch: BatchRecord) -> None:
        slots = asyncio.Semaphore(self._max_concurrency)
        tasks: set[asyncio.Task[None]] = set()
        failures: list[BaseException] = []

        def settled(task: asyncio.Task[None]) -> None:
            tasks.discard(task)
            if not task.cancelled() and task.exception() is not None:
                failures.append(task.exception())  # type: ignore[arg-type]

        self._inflight[batch.id] = tasks
        last = -1
        try:
            while batch.id not in self._cancelled:
                page = await self._store.pending_lines(batch.id, _PAGE, last)
                if not page:
                    break
                for line in page:
                    await slots.acquire()
                    if batch.id in self._cancelled:
                        slots.release()
                        break
                    task = asyncio.create_task(self._one(batch, line))
                    tasks.add(task)
                    task.add_done_callback(settled)
                    # Released when the task ends in any way, even cancelled before it ever ran
                    # (a release inside the task would then never happen and leak the slot).
                    task.add_done_callback(lambda _: slots.release())
                    last = line.index
            await asyncio.gather(*tasks, return_exceptions=True)
            if failures:
                # A line whose result could not be stored (a full disk) is still pending: fail the
                # pass, which ``_loop`` runs again, rather than finalize the batch without it.
                raise failures[0]
        finally:
            for task in tasks:
                task.cancel()
            self._inflight.pop(batch.id, None)

    async def _one(self, batch: BatchRecord, line: PendingLine) -> None:
        res = await self._execute_with_retry(batch, line)
        result = output_line(line.custom_id, res.status, res.request_id, res.body)
        await self._store.complete_line(batch.id, line.index, result, is_error=res.status != 200)

    async def _execute_with_retry(self, batch: BatchRecord, line: PendingLine) -> LineResult:
        deadline = time.time() + self._retry.total_s
        if batch.expires_at is not None:
            deadline = min(deadline, batch.expires_at)
        delay = self._retry.first_delay_s
        while True:
            res = await self._execute(line.body, batch.endpoint, batch.key_id)
            if not retryable(res):
                return res
            # A rate limit says when it frees up: wait that long, not a guess (backoff otherwise).
            wait = _retry_after_s(res)
            wait = delay if wait is None else min(wait, self._retry.max_delay_s)
            if time.time() + wait > deadline:
                return res
            log.info("batch %s line %d: %d %s, retrying in %.1f s", batch.id, line.index, res.status,
                     _code(res), wait)
            await asyncio.sleep(wait)
            delay = min(delay * 2, self._retry.max_delay_s)

    async def _finalize(self, batch_id: str, status: str, stamp: str) -> None:
        """Write the output and error files (lines in input order) and the final status. The
        files belong to the batch's owner and count toward its tenant's storage quota, but the
        quota never fails a batch: its results are kept, and only new uploads are refused."""
        owner = await self._store.get_batch(batch_id)
        now = int(time.time())
        expires_at = None if self._output_retention_s is None else now + self._output_retention_s
        outputs: dict[str, tuple[FileRecord, bytes] | None] = {}
        for col, is_error, suffix in (("output_file_id", False, "output"), ("error_file_id", True, "error")):
            lines = await self._store.finished_lines(batch_id, is_error)
            if not lines:
                outputs[col] = None
                continue
            content = b"\n".join(_normalize(x) for x in lines) + b"\n"
            rec = FileRecord(new_file_id(), f"batch_{suffix}", f"{batch_id}_{suffix}.jsonl", len(content), now,
                             owner.key_id if owner else None, owner.tenant if owner else None, expires_at)
            outputs[col] = (rec, content)
        await self._store.finalize(batch_id, status, stamp, outputs)


def _code(res: LineResult) -> str | None:
    error = res.body.get("error")
    return error.get("code") if isinstance(error, dict) else None


def _param(res: LineResult) -> str | None:
    error = res.body.get("error")
    return error.get("param") if isinstance(error, dict) else None


def _retry_after_s(res: LineResult) -> float | None:
    value = res.headers.get("retry-after")
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:  # an HTTP-date or garbage: back off instead
        return None


def retryable(res: LineResult) -> bool:
    """Whether a line's failure was for want of capacity (run it again later) rather than final.

    A sequence-quota 429 naming ``n`` is final: the line alone asks for more sequences than its key
    may ever run (sequence_quota.py), so waiting cannot help, and retrying it kept its batch
    ``in_progress`` for the whole ``line_retry_s`` (an hour by default)."""
    code = _code(res)
    if res.status == 429 and code == "too_many_sequences" and _param(res) == "n":
        return False
    return (res.status == 503 and code in _RETRYABLE_503) or (res.status == 429 and code not in _FINAL_429)


def _normalize(line: bytes) -> bytes:
    """Stored results are compact JSON already; re-dumping guards against driver quirks."""
    return orjson.dumps(orjson.loads(line))


def new_file_id() -> str:
    """Time-ordered (creation nanoseconds first), so listing by creation is exact within a second;
    then ``STORED_ID_BYTES`` from the OS's CSPRNG, so the id of someone's file cannot be guessed."""
    return f"file-{time.time_ns():016x}{secrets.token_hex(STORED_ID_BYTES)}"
