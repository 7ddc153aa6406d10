"""The engine-core process: runs ``LLMEngine.step()`` in a loop, fed over ZeroMQ.

Keeping the step loop out of the server's process means a cache hit or a health check
never waits behind a forward pass (vLLM v1's EngineCore idea). The seam carries token ids,
parameters and text deltas as msgpack, never tensors.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import threading
import time
import traceback
from pathlib import Path
from typing import Any

import msgspec
import zmq

from blink.engine.config import EngineConfig
from blink.engine.errors import EngineError
from blink.engine.outputs import EngineStats, RequestOutput

# Message kinds on the input socket.
ADD, ABORT, SHUTDOWN = b"add", b"abort", b"shutdown"
# Message kinds on the output socket.
READY, OUTPUTS, FAILED, ERROR = b"ready", b"outputs", b"failed", b"error"

# How often the orphan watchdog looks for its parent, and how long one output send may block
# before the core checks whether anyone is still reading: a gateway killed with SIGKILL must not
# leave a model's worth of memory (GPU memory on a GPU host) blocked in a send.
_PARENT_CHECK_S = 0.5
_SEND_TIMEOUT_MS = 1000
# linux/prctl.h
_PR_SET_PDEATHSIG = 1


class ReadyInfo(msgspec.Struct):
    max_model_len: int
    num_blocks: int
    block_size: int
    vocab_size: int
    pid: int


class AddRequest(msgspec.Struct, array_like=True):
    request_id: str
    prompt_token_ids: list[int]
    params: dict[str, Any]
    arrival_time: float


class OutputBatch(msgspec.Struct, array_like=True):
    outputs: list[RequestOutput]
    stats: EngineStats


def configure_threads(threads: int) -> None:
    """Cap this process's compute threads before torch starts any pool.

    ``threads`` intra-op threads (0 = torch's default) and one inter-op thread: the step loop
    never runs ops concurrently, and torch's default inter-op pool (one per core) plus OpenMP's
    own default would oversubscribe the cores left to the gateway. The environment variables
    reach OpenMP/MKL only if set before their first parallel region, so this runs first thing.
    """
    if threads > 0:
        for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ[var] = str(threads)
    import torch

    if threads > 0:
        torch.set_num_threads(threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:  # already fixed once a parallel op has run; nothing to do
        pass


def die_with_parent(parent_pid: int) -> None:
    """Exit when the parent process dies, however it dies (``kill -9`` included).

    Two mechanisms, because each has a gap: Linux's parent-death signal fires even while the
    main thread is blocked inside a ZeroMQ call, but only on Linux and only for the thread that
    spawned us; the watchdog thread works everywhere and also covers a parent that died before
    the signal was armed (its pid no longer being our parent's).
    """
    with contextlib.suppress(OSError, AttributeError):  # prctl is Linux-only: the thread still works
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent_pid:
        os._exit(1)

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(_PARENT_CHECK_S)
        os._exit(1)  # no cleanup: whoever would read our goodbye is gone

    threading.Thread(target=watch, name="blink-parent-watchdog", daemon=True).start()


def _send(push: zmq.Socket, frames: list[bytes], parent_pid: int) -> None:
    """Send, waiting as long as the parent lives: a full pipe means a busy reader, not a dead one."""
    while True:
        try:
            push.send_multipart(frames)
            return
        except zmq.Again:
            if os.getppid() != parent_pid:
                os._exit(1)


def run_engine_core(
    config_dict: dict[str, Any], model_path: str, input_addr: str, output_addr: str, parent_pid: int = 0
) -> None:
    """Process entry point: build the engine, announce readiness, then loop forever.

    ``parent_pid`` is the spawning process (0: whoever our parent is now); we exit when it dies.
    """
    # The parent decides when we stop (it asks, then kills): a terminal's Ctrl-C or a SIGTERM sent to
    # the whole process group or cgroup (systemd's default KillMode, ``kill -- -PGID``) reaches us
    # too, and dying at once would fail the streams the gateway is still draining.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    parent_pid = parent_pid or os.getppid()
    die_with_parent(parent_pid)
    configure_threads(int(config_dict.get("threads", 0)))
    if int(config_dict.get("engine_nice", 0)) > 0:
        os.nice(int(config_dict["engine_nice"]))
    ctx = zmq.Context()
    ctx.setsockopt(zmq.LINGER, 0)
    pull = ctx.socket(zmq.PULL)
    pull.connect(input_addr)
    push = ctx.socket(zmq.PUSH)
    push.setsockopt(zmq.SNDTIMEO, _SEND_TIMEOUT_MS)
    push.connect(output_addr)
    enc = msgspec.msgpack.Encoder()

    def send(kind: bytes, payload: bytes) -> None:
        _send(push, [kind, payload], parent_pid)

    try:
        from blink.engine.llm_engine import LLMEngine
        from blink.engine.sampling_params import SamplingParams

        engine = LLMEngine(EngineConfig(**config_dict), Path(model_path))
    except BaseException as exc:  # report why we could not start, then exit
        send(FAILED, enc.encode(f"{type(exc).__name__}: {exc}"))
        push.close(linger=2000)
        ctx.term()
        raise SystemExit(1) from exc
    info = ReadyInfo(engine.max_model_len, engine.runner.num_blocks, engine.runner.block_size,
                     engine.runner.vocab_size, os.getpid())
    send(READY, enc.encode(info))
    add_dec = msgspec.msgpack.Decoder(AddRequest)
    str_dec = msgspec.msgpack.Decoder(str)
    poller = zmq.Poller()
    poller.register(pull, zmq.POLLIN)
    while True:
        # Block only when idle; otherwise drain whatever arrived since the last step.
        if not engine.has_unfinished() and not poller.poll(1000):
            continue
        aborted = False
        while poller.poll(0):
            kind, payload = pull.recv_multipart()
            if kind == ADD:
                req = add_dec.decode(payload)
                try:
                    engine.add_request(req.request_id, req.prompt_token_ids,
                                       SamplingParams(**req.params), req.arrival_time)
                except Exception as exc:  # validated in the frontend; this is a last guard
                    # An engine error's message is written for clients; anything else is not.
                    why = str(exc) if isinstance(exc, EngineError) else "the engine could not add it"
                    err = RequestOutput(req.request_id, [], "", finished=True, finish_reason="error",
                                        error=f"request rejected: {why}")
                    send(OUTPUTS, enc.encode(OutputBatch([err], engine.stats())))
            elif kind == ABORT:
                aborted = engine.abort_request(str_dec.decode(payload)) or aborted
            elif kind == SHUTDOWN:
                push.close(linger=1000)
                pull.close(linger=0)
                ctx.term()
                return
        if not engine.has_unfinished():
            if aborted:  # no step will carry fresh stats: send them alone, or gauges keep the last
                send(OUTPUTS, enc.encode(OutputBatch([], engine.stats())))
            continue
        try:
            outputs = engine.step()
        except Exception:
            send(ERROR, enc.encode(traceback.format_exc()))
            raise
        # Sent after every step, even one that produced no token (a prefill chunk): it is also
        # the heartbeat by which the frontend tells a long prompt from a hung core.
        send(OUTPUTS, enc.encode(OutputBatch(outputs, engine.stats())))
