"""CPU per request of each observability sink, measured in isolation (steadier than end to end
on a shared machine): a realistic finished request (4 stages, 32 token deltas) is handed to
``Observability.finish`` N times with one sink on; tracing exports real OTLP/HTTP protobuf to a
local sink, and its background export thread is included (process CPU time, all threads; the
sink server runs in this process too, so the tracing figure is an upper bound).

    python benchmarks/obs_sink_cost.py [--requests 3000]
"""

from __future__ import annotations

import argparse
import io
import sys
import threading
import time
from pathlib import Path

import uvicorn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from obs_overhead import otlp_sink  # noqa: E402
from server_overhead import free_port  # noqa: E402

from blink.obs.observer import Observability  # noqa: E402
from blink.obs.request_log import RequestLogger  # noqa: E402
from blink.obs.trace import RequestTrace  # noqa: E402
from blink.obs.tracing import Tracing  # noqa: E402


def finished_request() -> RequestTrace:
    t = RequestTrace(route="chat", model="fake", backend="fake", request_id="chatcmpl-0123456789")
    t.add_stage("parse", t.start, 1e-4)
    t.add_stage("resolve", t.start + 1e-4, 1e-5)
    t.backend_start = t.start + 2e-4
    for _ in range(32):
        t.on_delta(" t", True)
    t.completion_tokens, t.prompt_tokens, t.finish_reason = 32, 10, "stop"
    t.add_stage("backend_ttft", t.backend_start, 1e-3)
    t.add_stage("stream", t.start + 1e-3, 1e-3)
    return t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=3000)
    args = ap.parse_args()
    port = free_port()
    sink = uvicorn.Server(uvicorn.Config(otlp_sink, host="127.0.0.1", port=port, log_level="warning", lifespan="off"))
    threading.Thread(target=sink.run, daemon=True).start()
    while not sink.started:
        time.sleep(0.01)
    n = args.requests
    base = 0.0
    print(f"{'sink':<28}{'µs CPU/request':>16}")
    for name, make in (
        ("trace record only", lambda: Observability(metrics=False, live=False)),
        ("prometheus metrics", lambda: Observability(metrics=True, live=False)),
        ("dashboard live stats", lambda: Observability(metrics=False, live=True)),
        ("JSON request log", lambda: Observability(metrics=False, live=False,
                                                   request_log=RequestLogger(io.StringIO()))),
        ("OTLP tracing (100%)", lambda: Observability(metrics=False, live=False,
                                                      tracing=Tracing.otlp(f"http://127.0.0.1:{port}"))),
        ("all on", lambda: Observability(metrics=True, live=True, request_log=RequestLogger(io.StringIO()),
                                         tracing=Tracing.otlp(f"http://127.0.0.1:{port}"))),
    ):
        obs = make()
        traces = [finished_request() for _ in range(n)]
        c0 = time.process_time()
        for i, t in enumerate(traces):
            obs.finish(t)
            if i % 100 == 99:
                time.sleep(0.05)  # let the export thread keep up (no span dropped), as between real requests
        obs.close()  # flushes pending spans: their export cost is counted
        us = (time.process_time() - c0) / n * 1e6
        if name == "trace record only":
            base = us
        print(f"{name:<28}{us - base if name != 'trace record only' else us:>16.1f}")
    sink.should_exit = True


if __name__ == "__main__":
    from _proc import cpu_line

    print(cpu_line(), flush=True)
    main()
