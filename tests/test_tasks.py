"""``cancel_and_wait``: a closed service's loop has really stopped before ``aclose`` returns."""

from __future__ import annotations

import asyncio

import pytest

from blink.tasks import cancel_and_wait


async def _loop(ran: list[str]) -> None:
    try:
        await asyncio.sleep(3600)
    finally:
        ran.append("cleanup")  # the loop's own cleanup has run by the time the caller goes on


async def test_one_task_is_cancelled_and_its_cleanup_has_run() -> None:
    ran: list[str] = []
    task = asyncio.create_task(_loop(ran))
    await asyncio.sleep(0)
    await cancel_and_wait(task)
    assert task.cancelled() and ran == ["cleanup"]


async def test_several_none_and_finished_tasks() -> None:
    ran: list[str] = []
    tasks = [asyncio.create_task(_loop(ran)) for _ in range(3)]
    done = asyncio.create_task(asyncio.sleep(0))
    await done
    await cancel_and_wait([*tasks, done])
    await cancel_and_wait(None)
    assert all(t.cancelled() for t in tasks) and ran == ["cleanup"] * 3 and not done.cancelled()


async def test_a_task_that_failed_before_is_not_hidden() -> None:
    async def boom() -> None:
        raise ValueError("broken loop")

    task = asyncio.create_task(boom())
    await asyncio.sleep(0)
    with pytest.raises(ValueError, match="broken loop"):
        await cancel_and_wait(task)
