"""One model served by several ``openai_http`` replicas that come and go, as one Backend.

Discovery (static list or DNS, re-resolved every ``interval_s``) keeps a one-tier
``RoutedBackend`` up to date, so requests get its balancing, breakers and transparent retry
before the first token. Active health checks GET each replica's ``health_path``: after
``unhealthy_after`` failures a replica leaves rotation, after ``healthy_after`` successes it
returns. A replica that dies between two checks costs a retry on another, not a client error;
streams already running on it end with an explicit SSE error.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable

import aiohttp

from blink.backends.base import Backend, Delta, GenerationRequest, Health, Load, ModelCard
from blink.backends.discovery import ReplicaSource, origin
from blink.config.discovery import DiscoverySettings
from blink.gateway.router.routed import RoutedBackend, RoutedConfig
from blink.gateway.router.tier import Replica, Tier

log = logging.getLogger("blink.discovery")

# A removed replica's client is closed this long after it left, so streams on it can finish.
_CLOSE_GRACE_S = 30.0


class ReplicaSetBackend:
    def __init__(
        self,
        name: str,
        source: ReplicaSource,
        make_backend: Callable[[str, str], Backend],
        settings: DiscoverySettings,
        config: RoutedConfig | None = None,
    ) -> None:
        """``make_backend(name, base_url)`` builds one replica's client."""
        self.name = name
        self.source = source
        self.settings = settings
        self._make = make_backend
        self.tier = Tier("replicas", [], discovered=True)
        self.routed = RoutedBackend(name, [self.tier], [], config=config, owns_backends=False)
        self._urls: dict[str, str] = {}  # replica name -> base URL
        self._streaks: dict[str, int] = {}  # replica name -> consecutive probe results (+ ok, - failed)
        self._tasks: set[asyncio.Task[None]] = set()
        self._retired: list[Backend] = []  # removed replicas, closed after a grace period
        self._http: aiohttp.ClientSession | None = None

    # -- Backend ------------------------------------------------------------------------------

    def models(self) -> list[ModelCard]:
        return [ModelCard(id=self.name, owned_by="blink-replicas")]

    def stream(self, req: GenerationRequest) -> AsyncIterator[Delta]:
        return self.routed.stream(req)

    def load(self) -> Load:
        return self.routed.load()

    async def health(self) -> Health:
        up = sum(1 for r in self.tier.replicas if r.healthy)
        return Health(ok=up > 0, detail=f"{up}/{len(self.tier.replicas)} replicas healthy")

    async def start(self) -> None:
        if self._tasks:
            return
        self._http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.settings.health_timeout_s))
        await self.refresh()
        loops = [self._every(self.settings.health_interval_s, self.check_health)] if self.settings.health_path else []
        if self.settings.mode == "dns":
            loops.append(self._every(self.settings.interval_s, self.refresh))
        for coro in loops:
            task = asyncio.get_running_loop().create_task(coro)
            self._tasks.add(task)

    async def aclose(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        backends = [r.backend for r in self.tier.replicas] + self._retired
        await asyncio.gather(*(b.aclose() for b in backends), return_exceptions=True)
        if self._http is not None:
            await self._http.close()

    # -- discovery and health -------------------------------------------------------------------

    async def refresh(self) -> None:
        """Resolve the replicas again; on failure keep the last known set."""
        try:
            urls = await self.source.urls()
        except Exception as exc:
            log.warning("replica discovery for %s failed (%s); keeping %d replicas", self.name, exc, len(self._urls))
            return
        current = {r.name: r.backend for r in self.tier.replicas}
        backends: list[Backend] = []
        for url in urls:
            name = f"{self.name}@{url.split('//', 1)[-1].split('/', 1)[0]}"
            backend = current.get(name)
            if backend is None:
                backend = self._make(name, url)
                await backend.start()
                self._urls[name] = url
            backends.append(backend)
        removed = self.tier.set_backends(backends)
        self.routed.replicas_changed()  # e.g. prefix affinity once there are two
        for gone in removed:
            self._urls.pop(gone.name, None)
            self._streaks.pop(gone.name, None)
            self._retired.append(gone)
            self._later(_CLOSE_GRACE_S, gone.aclose)
        if removed or len(backends) != len(current):
            log.info("model %s: %d replicas %s", self.name, len(backends), sorted(self._urls.values()))

    async def check_health(self) -> None:
        await asyncio.gather(*(self._probe(r) for r in list(self.tier.replicas)))

    async def _probe(self, replica: Replica) -> None:
        url = self._urls.get(replica.name)
        if url is None or self._http is None:
            return
        try:
            async with self._http.get(origin(url) + self.settings.health_path) as resp:
                ok = resp.status == 200
        except (aiohttp.ClientError, TimeoutError):
            ok = False
        streak = self._streaks.get(replica.name, 0)
        streak = max(streak, 0) + 1 if ok else min(streak, 0) - 1
        self._streaks[replica.name] = streak
        if replica.healthy and streak <= -self.settings.unhealthy_after:
            replica.healthy = False
            log.warning("replica %s failed %d health checks: out of rotation", replica.name, -streak)
        elif not replica.healthy and streak >= self.settings.healthy_after:
            replica.healthy = True
            log.info("replica %s is healthy again: back in rotation", replica.name)

    async def _every(self, interval_s: float, job: Callable[[], object]) -> None:
        while True:
            await asyncio.sleep(interval_s)
            try:
                await job()  # type: ignore[misc]
            except Exception:
                log.exception("%s: periodic %s failed", self.name, getattr(job, "__name__", "job"))

    def _later(self, delay_s: float, job: Callable[[], object]) -> None:
        async def run() -> None:
            await asyncio.sleep(delay_s)
            await job()  # type: ignore[misc]

        task = asyncio.get_running_loop().create_task(run())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
