"""The engine-core process: runs ``LLMEngine.step()`` in a loop, fed over ZeroMQ.

Keeping the step loop out of the server's process means a cache hit or a health check
never waits behind a forward pass (vLLM v1's EngineCore idea). The seam carries token ids,
parameters and text deltas as msgpack, never tensors.
"""

from __future__ import annotations

import os
import signal
import traceback
from dataclasses import asdict
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


def run_engine_core(config_dict: dict[str, Any], model_path: str, input_addr: str, output_addr: str) -> None:
    """Process entry point: build the engine, announce readiness, then loop forever."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when we stop
    configure_threads(int(config_dict.get("threads", 0)))
    if int(config_dict.get("nice", 0)) > 0:
        os.nice(int(config_dict["nice"]))
    ctx = zmq.Context()
    pull = ctx.socket(zmq.PULL)
    pull.connect(input_addr)
    push = ctx.socket(zmq.PUSH)
    push.connect(output_addr)
    enc = msgspec.msgpack.Encoder()
    try:
        from blink.engine.llm_engine import LLMEngine
        from blink.engine.sampling_params import SamplingParams

        engine = LLMEngine(EngineConfig(**config_dict), Path(model_path))
    except BaseException as exc:  # report why we could not start, then exit
        push.send_multipart([FAILED, enc.encode(f"{type(exc).__name__}: {exc}")])
        push.close(linger=2000)
        ctx.term()
        raise SystemExit(1) from exc
    info = ReadyInfo(engine.max_model_len, engine.runner.num_blocks, engine.runner.block_size,
                     engine.runner.vocab_size, os.getpid())
    push.send_multipart([READY, enc.encode(info)])
    add_dec = msgspec.msgpack.Decoder(AddRequest)
    str_dec = msgspec.msgpack.Decoder(str)
    poller = zmq.Poller()
    poller.register(pull, zmq.POLLIN)
    parent = os.getppid()
    while True:
        # Block only when idle (waking each second to notice an orphaning parent death);
        # otherwise drain whatever arrived since the last step.
        if not engine.has_unfinished() and not poller.poll(1000):
            if os.getppid() != parent:
                return
            continue
        timeout = 0
        while poller.poll(timeout):
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
                    push.send_multipart([OUTPUTS, enc.encode(OutputBatch([err], engine.stats()))])
            elif kind == ABORT:
                engine.abort_request(str_dec.decode(payload))
            elif kind == SHUTDOWN:
                push.close(linger=1000)
                pull.close(linger=0)
                ctx.term()
                return
        if not engine.has_unfinished():
            continue
        try:
            outputs = engine.step()
        except Exception:
            push.send_multipart([ERROR, enc.encode(traceback.format_exc())])
            raise
        if outputs:
            push.send_multipart([OUTPUTS, enc.encode(OutputBatch(outputs, engine.stats()))])


def config_to_dict(config: EngineConfig) -> dict[str, Any]:
    return asdict(config)
