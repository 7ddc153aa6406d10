"""The engine's only public async API: ``AsyncEngine.generate`` and ``abort``.

Runs in the server's event loop and never blocks it: the model runs in an engine-core
process (``core_process``); this side tokenises, validates, ships requests over ZeroMQ and
fans the per-step output batches out to one queue per request.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import os
import tempfile
import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator
from dataclasses import asdict
from pathlib import Path

import msgspec
import zmq
import zmq.asyncio

from blink.engine import core_process as cp
from blink.engine.config import EngineConfig
from blink.engine.errors import EngineDeadError, EngineError, InvalidParameterError, RequestFailedError
from blink.engine.loader import resolve_model_path
from blink.engine.outputs import EngineStats, RequestOutput
from blink.engine.request_checks import EngineLimits, check_request
from blink.engine.sampling_params import SamplingParams
from blink.engine.structured.spec import check_spec
from blink.engine.tokenizer import Tokenizer

log = logging.getLogger("blink.engine")

# Loading a small model takes seconds; a big one on a slow disk can take minutes.
_READY_TIMEOUT_S = 600.0
# Shutdown stays within 5 s whatever the core is doing (stepping, hung, stopped, gone): it asks,
# then kills, each wait bounded. A clean exit takes well under the first wait; the second is as
# long because a SIGKILL waits for a process in uninterruptible I/O (loading weights on a busy
# disk) to leave it.
_SHUTDOWN_JOIN_S = (2.0, 3.0)
# Parsed specs remembered by the frontend (each entry is just its text): the engine core's
# compiled-grammar LRU holds 64; the frontend's cheaper entries can cover more.
_VALID_SPECS_KEPT = 256


class AsyncEngine:
    """Front of one engine-core process."""

    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        self.tokenizer: Tokenizer | None = None
        self.limits: EngineLimits | None = None
        self.model_path: Path | None = None
        self.stats = EngineStats()
        self._queues: dict[str, asyncio.Queue[RequestOutput | BaseException]] = {}
        self._proc: multiprocessing.process.BaseProcess | None = None
        self._ctx: zmq.asyncio.Context | None = None
        self._push: zmq.asyncio.Socket | None = None
        self._pull: zmq.asyncio.Socket | None = None
        self._reader: asyncio.Task[None] | None = None
        self._dead: BaseException | None = None
        # Set when the core dies; a supervisor awaits it (``wait_dead``) to restart the core.
        self._died = asyncio.Event()
        self._ipc_dir: tempfile.TemporaryDirectory[str] | None = None
        self._enc = msgspec.msgpack.Encoder()
        # Structured-output specs that parsed (check_structured), least recently used first.
        self._valid_specs: OrderedDict[tuple[str, str, str], None] = OrderedDict()
        # The step watchdog: requests the core still owns (sent, not yet finished or aborted) and
        # when the core was last heard from (or, after an idle spell, when it was given work).
        self._owned: set[str] = set()
        self._last_heard = time.monotonic()

    # -- lifecycle --------------------------------------------------------------------------

    async def start(self) -> None:
        """Resolve/download the model, load the tokenizer, spawn the core, wait until ready."""
        if self._proc is not None:
            return
        loop = asyncio.get_running_loop()
        self.model_path = await loop.run_in_executor(
            None, resolve_model_path, self.config.model, self.config.revision
        )
        self.tokenizer = await loop.run_in_executor(None, Tokenizer.from_pretrained, self.model_path)
        # Unique socket paths per engine so several engines can share a host.
        self._ipc_dir = tempfile.TemporaryDirectory(prefix="blink-engine-")
        in_addr = f"ipc://{self._ipc_dir.name}/in"
        out_addr = f"ipc://{self._ipc_dir.name}/out"
        self._ctx = zmq.asyncio.Context()
        self._push = self._ctx.socket(zmq.PUSH)
        self._push.setsockopt(zmq.SNDHWM, 0)  # unbounded: bursts queue instead of blocking the loop
        self._push.bind(in_addr)
        self._pull = self._ctx.socket(zmq.PULL)
        self._pull.bind(out_addr)
        mp = multiprocessing.get_context("spawn")
        cfg = self.config.engine_fields()
        cfg["model"] = str(self.model_path)
        self._proc = mp.Process(
            target=cp.run_engine_core,
            args=(cfg, str(self.model_path), in_addr, out_addr, os.getpid()),
            name=f"blink-engine-{uuid.uuid4().hex[:6]}",
            daemon=True,
        )
        self._proc.start()
        await self._wait_ready()
        self._reader = asyncio.create_task(self._read_outputs(), name="blink-engine-reader")
        # The process's sentinel becomes readable the moment it exits: in-flight requests fail
        # and the supervisor hears of it at once, not at the reader's next poll timeout.
        loop.add_reader(self._proc.sentinel, self._on_core_exit, self._proc)

    async def restart(self) -> None:
        """Replace a dead (or hung) core with a fresh one: the supervisor's one call.

        The tokenizer and limits stay as they were until the new core is ready, so requests
        waiting for the restart can still be tokenised and checked.
        """
        await self.shutdown()
        self._proc = None
        self._dead = None
        self._died = asyncio.Event()
        self._owned.clear()
        await self.start()

    async def wait_dead(self) -> None:
        """Return once the current core has died (at once if it already has)."""
        await self._died.wait()

    def _on_core_exit(self, proc: multiprocessing.process.BaseProcess) -> None:
        with contextlib.suppress(Exception):
            asyncio.get_running_loop().remove_reader(proc.sentinel)
        if proc is self._proc:
            code = proc.exitcode  # None when the exit is not yet reapable; the signal tells more
            self._mark_dead(EngineDeadError("engine process died" + (f" (exit code {code})" if code is not None else "")))

    def _mark_dead(self, exc: BaseException) -> None:
        """Fail every in-flight request, zero the gauges and tell the supervisor; idempotent."""
        if self._dead is None:
            self._dead = exc
            log.error("engine core died: %s", exc)
        # A dead core runs nothing and holds no KV blocks: gauges must not keep its last values.
        self.stats = EngineStats(num_blocks=self.stats.num_blocks)
        self._owned.clear()
        self._fail_all(exc)
        self._died.set()

    async def _wait_ready(self) -> None:
        if self._pull is None or self._proc is None:
            raise EngineDeadError("engine process was not started")
        deadline = time.monotonic() + _READY_TIMEOUT_S
        while True:
            if await self._pull.poll(200):
                kind, payload = await self._pull.recv_multipart()
                if kind == cp.READY:
                    info = msgspec.msgpack.decode(payload, type=cp.ReadyInfo)
                    self.limits = EngineLimits(info.max_model_len, info.num_blocks, info.block_size,
                                               info.vocab_size)
                    self.stats = EngineStats(num_blocks=info.num_blocks)
                    return
                if kind == cp.FAILED:
                    msg = msgspec.msgpack.decode(payload, type=str)
                    await self.shutdown()
                    raise EngineError(f"engine failed to start: {msg}")
            if not self._proc.is_alive():
                await self.shutdown()
                raise EngineDeadError(f"engine process exited with code {self._proc.exitcode} while loading")
            if time.monotonic() > deadline:
                await self.shutdown()
                raise EngineError("engine did not become ready in time")

    async def shutdown(self) -> None:
        """Stop the core and release its sockets; bounded (about 5 s) whatever state it is in.

        Every send here is non-blocking: a PUSH socket whose peer is gone blocks a normal send
        forever, which is how SIGTERM used to hang after an engine failure.
        """
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._reader
            self._reader = None
        proc = self._proc
        if proc is not None:
            with contextlib.suppress(Exception):
                asyncio.get_running_loop().remove_reader(proc.sentinel)
            if proc.is_alive():
                asked = False
                with contextlib.suppress(zmq.ZMQError, EngineDeadError):
                    self._send(cp.SHUTDOWN, b"")
                    asked = True
                await _stop_process(proc, asked)
        for sock in (self._push, self._pull):
            if sock is not None:
                sock.close(linger=0)
        if self._ctx is not None:
            self._ctx.term()
        self._push = self._pull = self._ctx = None
        if self._ipc_dir is not None:
            self._ipc_dir.cleanup()
            self._ipc_dir = None
        self._fail_all(EngineDeadError("engine shut down"))
        self.stats = EngineStats(num_blocks=self.stats.num_blocks)

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def is_alive(self) -> bool:
        return self._proc is not None and self._proc.is_alive() and self._dead is None

    # -- requests ---------------------------------------------------------------------------

    def _tok(self) -> Tokenizer:
        if self.tokenizer is None:
            raise EngineDeadError("engine is not started")
        return self.tokenizer

    def encode_chat(self, messages: list[dict[str, object]]) -> list[int]:
        return self._tok().apply_chat_template(messages, add_generation_prompt=True)

    def encode_prompt(self, text: str) -> list[int]:
        return self._tok().encode(text, add_special_tokens=True)

    def check(self, prompt_token_ids: list[int], params: SamplingParams) -> None:
        """Validate before generating, so errors reach the caller before any token."""
        if self.limits is None:
            raise EngineDeadError("engine is not running")
        check_request(prompt_token_ids, params, self.limits)

    async def check_structured(self, kind: str, spec: str, engine: str | None = None) -> None:
        """Parse a structured-output spec off the event loop (a large schema takes milliseconds)
        with the grammar engine that will compile it (``engine``, else the setting); specs that
        passed before are remembered, so a repeated schema costs a dict lookup."""
        engine = engine or self.config.structured_engine
        key = (engine, kind, spec)
        if key in self._valid_specs:
            self._valid_specs.move_to_end(key)
            return
        await asyncio.get_running_loop().run_in_executor(None, check_spec, kind, spec, engine)
        self._valid_specs[key] = None
        while len(self._valid_specs) > _VALID_SPECS_KEPT:
            self._valid_specs.popitem(last=False)

    async def generate(
        self, request_id: str, prompt_token_ids: list[int], params: SamplingParams
    ) -> AsyncIterator[RequestOutput]:
        """Yield one ``RequestOutput`` per engine step that produced tokens for this request.

        Leaving the loop early (break, cancellation, client disconnect) aborts the request
        in the core, which frees its KV blocks before its next step.
        """
        if self._dead is not None or self._push is None:
            raise EngineDeadError(f"engine is not running: {self._dead}")
        self.check(prompt_token_ids, params)
        if request_id in self._queues:
            raise EngineError(f"duplicate request id {request_id!r}")
        queue: asyncio.Queue[RequestOutput | BaseException] = asyncio.Queue()
        self._queues[request_id] = queue
        finished = False
        try:
            msg = cp.AddRequest(request_id, list(prompt_token_ids), _params_dict(params), time.monotonic())
            if not self._owned:
                self._last_heard = time.monotonic()  # an idle core's silence was not a stall
            self._owned.add(request_id)
            self._send(cp.ADD, self._enc.encode(msg))
            while True:
                item = await queue.get()
                if isinstance(item, BaseException):
                    finished = True
                    raise item
                if item.finished:
                    finished = True
                if item.error is not None:
                    if item.error_param is not None:  # the request's own fault (outputs.py)
                        raise InvalidParameterError(item.error, item.error_param)
                    raise RequestFailedError(item.error)
                yield item
                if finished:
                    return
        finally:
            self._queues.pop(request_id, None)
            self._owned.discard(request_id)
            if not finished:
                await self.abort(request_id)

    async def abort(self, request_id: str) -> None:
        if self._push is not None and self._dead is None:
            with contextlib.suppress(zmq.ZMQError, EngineDeadError):
                self._send(cp.ABORT, self._enc.encode(request_id))

    def _send(self, kind: bytes, payload: bytes) -> None:
        """Non-blocking send: the queue is unbounded, so EAGAIN means the core is gone."""
        if self._push is None:
            raise EngineDeadError("engine is not running")
        try:
            # pyzmq's asyncio socket completes a NOBLOCK send at once, errors inside the future.
            fut = self._push.send_multipart([kind, payload], flags=zmq.NOBLOCK)
            fut.result()
        except zmq.Again as exc:
            raise EngineDeadError("engine process is not reachable") from exc

    # -- output fan-out ---------------------------------------------------------------------

    async def _read_outputs(self) -> None:
        if self._pull is None or self._proc is None:
            return
        dec = msgspec.msgpack.Decoder(cp.OutputBatch)
        try:
            while True:
                if not await self._pull.poll(500):
                    if not self._proc.is_alive():
                        raise EngineDeadError(f"engine process died (exit code {self._proc.exitcode})")
                    self._check_stalled()
                    continue
                kind, payload = await self._pull.recv_multipart()
                self._last_heard = time.monotonic()
                if kind == cp.OUTPUTS and self._dead is None:
                    batch = dec.decode(payload)
                    self.stats = batch.stats
                    for out in batch.outputs:
                        if out.finished:
                            self._owned.discard(out.request_id)  # a slow reader's queue is not the core's work
                        q = self._queues.get(out.request_id)
                        if q is not None:
                            q.put_nowait(out)
                elif kind == cp.ERROR:
                    # The traceback is for the server log; clients are told only that it failed.
                    tb = msgspec.msgpack.decode(payload, type=str)
                    log.error("engine step failed:\n%s", tb)
                    raise EngineDeadError("the engine's step failed (details in the server log)")
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            self._mark_dead(exc)

    def _check_stalled(self) -> None:
        """Kill a core that owns requests but has finished no step for ``step_timeout_s``; raising
        here marks it dead, which fails its requests and wakes the supervisor to restart it."""
        limit = self.config.step_timeout_s
        silent = time.monotonic() - self._last_heard
        if not limit or not self._owned or silent < limit or self._proc is None:
            return
        log.error("engine core %s finished no step in %.0f s with %d requests: killing it as hung",
                  self._proc.pid, silent, len(self._owned))
        with contextlib.suppress(OSError, ValueError):
            self._proc.kill()
        raise EngineDeadError(f"the engine finished no step in {limit:g} s and was stopped as hung")

    def _fail_all(self, exc: BaseException) -> None:
        for q in self._queues.values():
            q.put_nowait(exc if isinstance(exc, EngineError) else EngineDeadError(str(exc)))


async def _stop_process(proc: multiprocessing.process.BaseProcess, asked: bool) -> None:
    """Wait for a clean exit (if the core could be ``asked``), then SIGKILL (which also ends a
    stopped process). No SIGTERM: the core ignores it (core_process.run_engine_core).

    Polls instead of ``join`` in an executor: the default executor may be busy (tokenising),
    and a shutdown must not queue behind it.
    """
    for wait_s, stop in zip(_SHUTDOWN_JOIN_S, (None, proc.kill), strict=True):
        if stop is None and not asked:
            continue  # a core that never connected cannot hear a polite request
        if stop is not None:
            with contextlib.suppress(OSError, ValueError):
                stop()
        deadline = time.monotonic() + wait_s
        while proc.is_alive() and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        if not proc.is_alive():
            return
    log.error("engine core %s has not exited yet after SIGKILL", proc.pid)


def _params_dict(params: SamplingParams) -> dict[str, object]:
    return {k: v for k, v in asdict(params).items()}


def default_threads() -> int:
    """Leave one core to the gateway when there are few (a 2-core laptop)."""
    n = os.cpu_count() or 1
    return max(1, n - 1) if n <= 4 else n - 2
