"""Keeps an embedded engine core running: restart on death, hold requests while it restarts.

The engine core is a separate process, so it can die on its own (a crash, the OOM killer,
``kill -9``). Without supervision every later request would fail and ``/health`` would still
say ok, so nothing would ever restart it. The supervisor waits for the death, restarts the core
with exponential backoff, and answers three questions for the backend:

- ``ready``: may a request go to the engine now (``/ready``)?
- ``live``: is this process still worth keeping (``/health``)? False once restarts keep failing,
  so an orchestrator's liveness probe replaces the pod.
- ``wait_running``: a request arriving mid-restart waits (bounded) instead of failing at once.

Failures it reports carry code ``engine_unavailable`` with ``retry-after``: callers that retry
(the batch runner) key on exactly that code.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from typing import Literal, Protocol

from blink.config.supervision import SupervisionSettings
from blink.protocol.errors import BackendUnavailableError

log = logging.getLogger("blink.backends.supervisor")

ENGINE_UNAVAILABLE = "engine_unavailable"

State = Literal["running", "restarting", "failed", "stopped"]


class Restartable(Protocol):
    """What the supervisor needs from an engine (``AsyncEngine`` is one)."""

    def is_alive(self) -> bool: ...

    async def wait_dead(self) -> None: ...

    async def restart(self) -> None: ...


class EngineSupervisor:
    """Restarts one engine core; a backend asks it whether requests may go through."""

    def __init__(self, engine: Restartable, settings: SupervisionSettings, name: str) -> None:
        self._engine = engine
        self.settings = settings
        self.name = name
        self.state: State = "stopped"
        self.restarts = 0
        # Consecutive failures: restarts that did not come up, and cores that died before
        # running ``stable_after_s``. Drives the backoff and liveness.
        self.failures = 0
        self._next_attempt_at = 0.0
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> None:
        """Begin watching a core that has just started."""
        if self._task is None:
            self._set("running")
            self._task = asyncio.get_running_loop().create_task(self._watch(), name=f"blink-supervise-{self.name}")

    async def stop(self) -> None:
        """Stop watching (before the engine is shut down, so the shutdown is not a 'death')."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._set("stopped")

    # -- what the backend asks ----------------------------------------------------------------

    def ready(self) -> bool:
        return self.state == "running" and self._engine.is_alive()

    def live(self) -> bool:
        """False once restarts keep failing: the process should be replaced, not waited on."""
        return self.state != "failed"

    def detail(self) -> str:
        if self.state == "running" and not self._engine.is_alive():
            return "engine core died; restarting"
        if self.state == "running":
            return f"running (restarts: {self.restarts})" if self.restarts else ""
        return f"{self.state} (restarts: {self.restarts}, consecutive failures: {self.failures})"

    async def wait_running(self) -> None:
        """Return when the engine can take a request; raise 503 ``engine_unavailable`` when it
        cannot within ``restart_wait_s``, or at once when restarts keep failing or it is stopped."""
        deadline = time.monotonic() + self.settings.restart_wait_s
        while not self.ready():
            if self.state in ("failed", "stopped"):
                raise self.unavailable(f"the engine is {self.state}")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise self.unavailable("the engine is restarting")
            changed = self._changed
            with contextlib.suppress(TimeoutError):
                # Wakes on every state change; the short cap also covers a death the watcher
                # has not seen yet (state still "running", core already gone).
                await asyncio.wait_for(changed.wait(), min(remaining, 0.5))

    def unavailable(self, detail: str) -> BackendUnavailableError:
        """The 503 every engine-down failure becomes, with a hint of when to come back."""
        return BackendUnavailableError(
            f"Model '{self.name}' is temporarily unavailable: {detail}. Retry shortly.",
            code=ENGINE_UNAVAILABLE,
            headers={"retry-after": str(self.retry_after_s())},
        )

    def retry_after_s(self) -> int:
        """Seconds until the next restart attempt, at least 1."""
        return max(1, math.ceil(self._next_attempt_at - time.monotonic()))

    # -- the watch loop -----------------------------------------------------------------------

    async def _watch(self) -> None:
        while True:
            started_at = time.monotonic()
            await self._engine.wait_dead()
            if time.monotonic() - started_at >= self.settings.stable_after_s:
                self.failures = 0  # it ran long enough: this death is a fresh incident
            elif self.restarts or self.failures:
                self.failures += 1  # died again soon after a restart: count it like a failed one
            self._set("failed" if self.failures >= self.settings.max_restart_failures else "restarting")
            await self._restart_until_up()

    async def _restart_until_up(self) -> None:
        while True:
            delay = self._backoff_s()
            self._next_attempt_at = time.monotonic() + delay
            if delay:
                log.warning("engine %s: restart attempt in %.1f s (%d consecutive failures)",
                            self.name, delay, self.failures)
                await asyncio.sleep(delay)
            try:
                await self._engine.restart()
            except Exception as exc:  # any reason it did not come up: count it, back off, retry
                self.failures += 1
                log.error("engine %s: restart failed (%d in a row): %s", self.name, self.failures, exc)
                if self.failures >= self.settings.max_restart_failures:
                    self._set("failed")
                continue
            self.restarts += 1
            log.warning("engine %s: restarted (restart %d)", self.name, self.restarts)
            self._set("running")
            return

    def _backoff_s(self) -> float:
        if self.failures == 0:
            return 0.0
        s = self.settings
        # The exponent is capped so a core that never comes back cannot overflow the float.
        return min(s.restart_backoff_s * 2 ** min(self.failures - 1, 32), s.restart_backoff_max_s)

    def _set(self, state: State) -> None:
        self.state = state
        self._changed.set()
        self._changed = asyncio.Event()
