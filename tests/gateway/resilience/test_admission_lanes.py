"""Per-priority queue depth and wait of a tier's admission queue (exported by RouterCollector)."""

from __future__ import annotations

import asyncio

from blink.gateway.resilience.admission import AdmissionConfig, AdmissionController


async def test_queue_depth_and_wait_by_priority_class() -> None:
    ac = AdmissionController("t", AdmissionConfig(max_concurrency=1, max_queue=8))
    first = ac.try_enter("interactive", None)
    assert first is not None
    held = await first
    batch = ac.try_enter("batch", None)
    voice = ac.try_enter("voice", None)
    assert batch is not None and voice is not None
    assert ac.queued_by_lane() == {"voice": 1, "interactive": 0, "normal": 0, "batch": 1, "idle": 0}
    await asyncio.sleep(0.01)
    held.release()
    (await voice).release()  # voice goes first, then batch
    (await batch).release()
    assert ac.queued_by_lane()["batch"] == 0
    assert ac.waited == {"voice": 1, "interactive": 0, "normal": 0, "batch": 1, "idle": 0}
    assert ac.wait_s["batch"] >= ac.wait_s["voice"] >= 0.01
