"""Batch lines that failed only because the backend was down or rate-limited are run again:
a real upstream that answers 503 (then 429) for a while, then works, and the lines end 200."""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest
from batch_helpers import chat_line, jsonl, read_jsonl, wait_batch
from live_server import LiveServer
from upstream_server import FakeUpstream

from blink.config.batch import BatchSettings
from blink.config.models import OpenAIHTTPModel
from blink.config.settings import Settings
from blink.gateway.batch.executor import LineResult
from blink.gateway.batch.runner import new_file_id, retryable
from blink.serve import build_app

LINES = 6


@pytest.fixture(scope="module")
def flaky() -> Iterator[FakeUpstream]:
    up = FakeUpstream(tokens=4)
    with LiveServer(up) as server:
        up.base_url = f"{server.url}/v1"
        yield up


def _gateway(flaky: FakeUpstream, tmp: str, retry_s: float) -> LiveServer:
    settings = Settings(
        models=[OpenAIHTTPModel(name="fake", kind="openai_http", base_url=flaky.base_url)],
        batch=BatchSettings(path=f"{tmp}/batch.db", max_concurrency=2, line_retry_s=retry_s),
    )
    return LiveServer(build_app(settings))


def _run(server: LiveServer) -> list[dict[str, object]]:
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)
    upload = client.files.create(file=("in.jsonl", jsonl([chat_line(f"l{i}", "hi", model="fake")
                                                          for i in range(LINES)])), purpose="batch")
    batch = client.batches.create(input_file_id=upload.id, endpoint="/v1/chat/completions", completion_window="24h")
    done = wait_batch(client, batch.id)
    assert done.status == "completed"
    return read_jsonl(client, done.output_file_id) + read_jsonl(client, done.error_file_id)


def test_lines_failed_by_a_down_or_throttled_upstream_are_retried(flaky: FakeUpstream,
                                                                tmp_path_factory: pytest.TempPathFactory) -> None:
    with _gateway(flaky, str(tmp_path_factory.mktemp("retry")), retry_s=120) as server:
        before = len(flaky.requests)
        flaky.fail_next = [503] * 5 + [429] * 2
        lines = _run(server)
    assert flaky.fail_next == []  # every failure was served...
    assert len(flaky.requests) - before == LINES + 7  # ...and each failed attempt was run again
    assert sorted(str(x["custom_id"]) for x in lines) == [f"l{i}" for i in range(LINES)]
    assert {x["response"]["status_code"] for x in lines} == {200}  # type: ignore[index]


def test_without_retry_time_a_down_upstream_is_a_final_503(flaky: FakeUpstream,
                                                            tmp_path_factory: pytest.TempPathFactory) -> None:
    with _gateway(flaky, str(tmp_path_factory.mktemp("noretry")), retry_s=0) as server:
        flaky.fail_next = [503] * LINES
        lines = _run(server)
    statuses = [x["response"]["status_code"] for x in lines]  # type: ignore[index]
    assert statuses == [503] * LINES


@pytest.mark.parametrize(("status", "code", "again"), [
    (429, "too_many_sequences", True),  # the key's other sequences will finish
    (503, "backend_unavailable", True),
    (503, "engine_unavailable", True),
    (429, "rate_limit_exceeded", True),
    (429, None, True),  # an upstream's rate limit without a code
    (429, "budget_exceeded", False),  # a spent budget does not come back in a minute
    (429, "insufficient_quota", False),
    (503, "overloaded", True),  # the server full for now
    (503, "ratelimit_store_unavailable", True),  # Redis down a moment (with fail_open false): was final
    (503, "key_store_unavailable", True),
    (500, "internal_error", False),
    (400, "invalid_value", False),
    (200, None, False),
])
def test_which_failures_are_retried(status: int, code: str | None, again: bool) -> None:
    body = {"error": {"message": "m", "type": "t", "param": None, "code": code}} if status != 200 else {"id": "x"}
    assert retryable(LineResult(status, "req", body)) is again


def test_a_line_asking_more_sequences_than_its_key_may_run_is_final() -> None:
    """n beyond the key's max_sequences can never run: retried, it held its batch in_progress
    for line_retry_s (an hour by default)."""
    body = {"error": {"message": "m", "type": "rate_limit_error", "param": "n", "code": "too_many_sequences"}}
    assert retryable(LineResult(429, "req", body)) is False


async def test_a_line_whose_result_could_not_be_stored_runs_again(tmp_path: object) -> None:
    """The store refuses one line's result (a full disk for a moment): the line stays pending and
    runs again, and the batch completes with every line. The failure used to vanish with its task:
    the batch was finalized ``completed`` without that line."""
    import asyncio
    from pathlib import Path
    from typing import Any

    from blink.gateway.batch.runner import BatchRunner, LineRetry
    from blink.gateway.batch.store import BatchRecord, NewLine, SqlBatchStore
    from blink.gateway.storage.sql import SQLITE, sqlite_connect
    from blink.protocol.errors import StorageError

    class FullOnce(SqlBatchStore):
        """The real SQLite store, whose disk is full for the first result written."""

        refused = 0

        async def complete_line(self, batch_id: str, index: int, result: dict[str, Any], is_error: bool) -> bool:
            if not self.refused:
                self.refused += 1
                raise StorageError("full", status=507)
            return await super().complete_line(batch_id, index, result, is_error)

    async def execute(body: dict[str, Any], endpoint: str, key_id: str | None) -> LineResult:
        return LineResult(200, "r", {"n": body["n"]})

    store = FullOnce(sqlite_connect(Path(str(tmp_path)) / "b.db"), *SQLITE)
    await store.start()
    runner = BatchRunner(store, execute, 2, LineRetry(total_s=0), None)
    try:
        await store.create_batch(BatchRecord("b", "f", "/v1/chat/completions", "24h", "validating", 0),
                                 [NewLine(i, f"c{i}", body={"n": i}) for i in range(4)])
        await runner.start()
        for _ in range(400):  # bounded: the runner retries a failed pass after a short wait
            got = await store.get_batch("b")
            if got is not None and got.status == "completed":
                break
            await asyncio.sleep(0.05)
        assert got is not None and got.status == "completed" and store.refused == 1
        assert (got.total, got.completed, got.failed) == (4, 4, 0)
    finally:
        await runner.aclose()
        await store.aclose()


async def test_a_rate_limited_line_waits_for_its_retry_after(tmp_path: object) -> None:
    """The runner waits what the 429's ``retry-after`` says, not its own backoff: with a backoff
    of an hour, a line told to retry after 0 s is run again at once and ends 200."""
    from typing import Any

    from blink.gateway.batch.runner import BatchRunner, LineRetry
    from blink.gateway.batch.store import BatchRecord, PendingLine

    calls: list[str | None] = []

    async def execute(body: dict[str, Any], endpoint: str, key_id: str | None) -> LineResult:
        calls.append(key_id)
        if len(calls) < 3:
            return LineResult(429, "r", {"error": {"code": "rate_limit_exceeded"}}, headers={"retry-after": "0"})
        return LineResult(200, "r", {"ok": True})

    runner = BatchRunner(None, execute, 1, LineRetry(total_s=7200, first_delay_s=3600),  # type: ignore[arg-type]
                         None)
    batch = BatchRecord("b", "f", "/v1/chat/completions", "24h", "in_progress", 0, key_id="k1")
    res = await runner._execute_with_retry(batch, PendingLine(0, "c", {}))
    assert res.status == 200 and calls == ["k1", "k1", "k1"]


def test_file_ids_are_time_ordered_and_carry_96_random_bits() -> None:
    """File ids carried 32 random bits (``uuid4().hex[:8]``): a stored object's id must not be guessable."""
    ids = [new_file_id() for _ in range(1000)]
    assert all(len(i) == len("file-") + 16 + 24 and i[5:].isalnum() and i[5:] == i[5:].lower() for i in ids)
    assert len({i[-24:] for i in ids}) == 1000  # the random part alone tells them apart
    assert ids == sorted(ids, key=lambda i: i[5:21])  # creation order first


async def test_a_store_that_keeps_failing_is_logged_once_and_retried_less_often(
        tmp_path: object, caplog: pytest.LogCaptureFixture) -> None:
    """A full disk fails every pass: one traceback, then quiet, with the waits growing; a traceback
    per 2 s poll would itself fill the disk. The runner recovers when the store does."""
    import asyncio
    import logging
    from pathlib import Path

    from blink.gateway.batch import runner as runner_mod
    from blink.gateway.batch.runner import BatchRunner, LineRetry
    from blink.gateway.batch.store import SqlBatchStore
    from blink.gateway.storage.sql import SQLITE, sqlite_connect
    from blink.protocol.errors import StorageError

    class Full(SqlBatchStore):
        failing = True
        passes = 0

        async def active_batches(self) -> list:  # type: ignore[override]
            self.passes += 1
            if self.failing:
                raise StorageError("disk full", status=507)
            return await super().active_batches()

    async def execute(body: dict, endpoint: str, key_id: str | None) -> LineResult:
        return LineResult(200, "r", {})

    store = Full(sqlite_connect(Path(str(tmp_path)) / "b.db"), *SQLITE)
    await store.start()
    runner = BatchRunner(store, execute, 1, LineRetry(total_s=0), None)
    waits = []
    for failures in range(8):
        runner._failures = failures
        waits.append(runner.failure_wait_s())
    runner._failures = 0
    assert waits == sorted(waits) and waits[0] == runner_mod._IDLE_POLL_S and waits[-1] == runner_mod._MAX_FAILURE_WAIT_S
    with caplog.at_level(logging.INFO, logger="blink.gateway.batch"):
        await runner.start()
        try:
            for _ in range(3):  # passes run on wake-ups too: three failed passes in a row
                runner.notify()
                await asyncio.sleep(0.05)
            assert store.passes >= 3 and runner._failures >= 3
            store.failing = False
            runner.notify()
            for _ in range(100):
                if runner._failures == 0:
                    break
                await asyncio.sleep(0.02)
        finally:
            await runner.aclose()
            await store.aclose()
    tracebacks = [r for r in caplog.records if r.exc_info]
    assert len(tracebacks) == 1 and runner._failures == 0
    assert any("recovered" in r.getMessage() for r in caplog.records)
