"""Where a decode step's host time goes (issue #24): µs per step, per phase, batch 1 and 64.

On a GPU a small model's decode forward is one CUDA-graph replay, so the step's speed is set by
the host-side Python around it. This measures that part on any machine: a tiny random model,
``decode_graphs="replay"`` (the GPU path's padded static buffers, without capturing) and the fused
CPU step off, so every step takes the code path a GPU step takes. Phases:

- schedule: ``Scheduler.schedule`` + ``update_after_step``;
- prepare: ``ModelRunner.execute`` minus the forward (spans, padding, static-buffer copies);
- forward: the replayed forward itself (what the GPU makes small; reported apart);
- sample: ``LLMEngine._sample_each`` (the draw and its device->host copy);
- detokenize: ``IncrementalDetokenizer.add``;
- post-process: the rest of ``LLMEngine.step`` (stop checks, appending, output objects).

Phase timers cost a little themselves, so the uninstrumented time per step is printed too
(``step, plain``), as is the host time without the forward. ``--rounds`` alternates plain and
instrumented runs in one process. Wall-clock timings need a quiet machine; ``--clock cpu`` (the
thread's CPU time) compares two trees on a loaded one:

    python benchmarks/step_overhead.py                  # batch 1 and 64, 3 rounds, wall clock
    python benchmarks/step_overhead.py --clock cpu      # on a loaded machine
    python benchmarks/step_overhead.py --quick          # a few steps, proves it runs
    python benchmarks/step_overhead.py --device cuda --shape qwen05 --dtype bfloat16  # on a GPU
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from blink.demo.tiny import build_tiny_checkpoint  # noqa: E402
from blink.engine.config import EngineConfig  # noqa: E402
from blink.engine.cpu_features import read_cpu_features  # noqa: E402
from blink.engine.detokenizer import IncrementalDetokenizer  # noqa: E402
from blink.engine.llm_engine import LLMEngine  # noqa: E402
from blink.engine.sampling_params import SamplingParams  # noqa: E402

# benchmarks/gpu_check.py's Qwen2.5-0.5B shape (the prompts here stay inside the trained
# tokenizer's 512 ids; the embedding is padded past them as the real model's is).
QWEN05 = dict(hidden_size=896, num_layers=24, num_heads=14, num_kv_heads=2, intermediate_size=4864,
              vocab_size=151936, extra_config={"rope_theta": 1000000.0})
PHASES = ("schedule", "prepare", "forward", "sample", "detokenize", "post-process")


class Probe:
    """Seconds spent inside wrapped callables, per phase, on ``clock``."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.seconds: defaultdict[str, float] = defaultdict(float)
        self.clock = clock

    def timed(self, phase: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        seconds, clock = self.seconds, self.clock

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            t0 = clock()
            try:
                return fn(*args, **kwargs)
            finally:
                seconds[phase] += clock() - t0

        return wrapper


@contextmanager
def instrumented(eng: LLMEngine, probe: Probe) -> Iterator[None]:
    """Wrap the engine's phases (instance attributes; the detokenizer's method for the duration)."""
    sched, runner = eng.scheduler, eng.runner
    graphs = runner._graphs
    if graphs is None:
        raise SystemExit("decode graphs are off: this benchmark needs decode_graphs='replay'")
    saved_steps = dict(graphs._steps)
    sched.schedule = probe.timed("schedule", sched.schedule)  # type: ignore[method-assign]
    sched.update_after_step = probe.timed("schedule", sched.update_after_step)  # type: ignore[method-assign]
    runner.execute = probe.timed("execute", runner.execute)  # type: ignore[method-assign]
    eng._sample_each = probe.timed("sample", eng._sample_each)  # type: ignore[method-assign]
    forward = {key: (step, _synced(replay, runner.device)) for key, (step, replay) in saved_steps.items()}
    graphs._steps = {key: (step, probe.timed("forward", replay)) for key, (step, replay) in forward.items()}
    add = IncrementalDetokenizer.add
    IncrementalDetokenizer.add = probe.timed("detokenize", add)  # type: ignore[method-assign]
    try:
        yield
    finally:
        IncrementalDetokenizer.add = add  # type: ignore[method-assign]
        graphs._steps = saved_steps
        for obj, name in ((sched, "schedule"), (sched, "update_after_step"), (runner, "execute"),
                          (eng, "_sample_each")):
            delattr(obj, name)


def _synced(replay: Callable[[], torch.Tensor], device: torch.device) -> Callable[[], torch.Tensor]:
    """On a GPU, wait for the replay, so its time lands in "forward" and not in the next phase
    that syncs (the sampler's device->host copy). A no-op wrapper elsewhere."""
    if device.type != "cuda":
        return replay

    def run() -> torch.Tensor:
        out = replay()
        torch.cuda.synchronize(device)
        return out

    return run


def decode_steps(eng: LLMEngine, batch: int, steps: int, tag: str, probe: Probe | None,
                 clock: Callable[[], float]) -> float:
    """Seconds per step over ``steps`` decode-only steps of ``batch`` greedy sequences."""
    params = SamplingParams(max_tokens=steps + 8, temperature=0.0, ignore_eos=True)
    for i in range(batch):
        eng.add_request(f"{tag}-{i}", [3 + (i * 7 + j) % 400 for j in range(16)], params)
    while any(s.num_computed_tokens < s.num_prompt_tokens for s in eng.scheduler.running) or eng.scheduler.waiting:
        eng.step()
    for _ in range(2):
        eng.step()
    ctx = instrumented(eng, probe) if probe is not None else _nothing()
    with ctx:
        t0 = clock()
        for _ in range(steps):
            eng.step()
        elapsed = clock() - t0
    for i in range(batch):
        eng.abort_request(f"{tag}-{i}")
    return elapsed / steps


@contextmanager
def _nothing() -> Iterator[None]:
    yield


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 64])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="cpu: this thread's CPU time (with --threads 1 the forward runs on it too), "
                         "for comparisons on a loaded machine; wall on a quiet one")
    ap.add_argument("--device", default="cpu", help="cuda: CUDA graphs captured (decode_graphs=auto), "
                    "the forward synced so its time is its own")
    ap.add_argument("--shape", choices=("tiny", "qwen05"), default="tiny",
                    help="qwen05: the Qwen2.5-0.5B shape of benchmarks/gpu_check.py (random weights)")
    ap.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    ap.add_argument("--quick", action="store_true", help="a few steps, one round: proves it runs")
    args = ap.parse_args()
    if args.quick:
        args.steps, args.rounds = 10, 1
    torch.set_num_threads(args.threads)
    clock = time.perf_counter if args.clock == "wall" else time.thread_time
    print(f"CPU: {read_cpu_features().describe()}; torch threads {args.threads}; {args.clock} clock")
    with tempfile.TemporaryDirectory() as tmp:
        shape = QWEN05 if args.shape == "qwen05" else {}
        arch = "qwen2" if args.shape == "qwen05" else "llama"
        path = build_tiny_checkpoint(Path(tmp) / "model", arch, seed=1, **shape)  # type: ignore[arg-type]
        graphs = "auto" if args.device.startswith("cuda") else "replay"
        cfg = EngineConfig(model=str(path), device=args.device, dtype=args.dtype, max_model_len=1024,
                           max_num_seqs=max(args.batches), max_num_batched_tokens=4096,
                           kv_cache_memory_bytes=(2 << 30) if args.shape == "qwen05" else (64 << 20),
                           enable_prefix_caching=False, decode_graphs=graphs, fused_decode=False,
                           threads=args.threads)
        eng = LLMEngine(cfg, path)
        print(f"{args.shape} {arch} ({args.dtype}) on {args.device}, decode_graphs={graphs}, fused_decode off; "
              f"{args.steps} steps x {args.rounds} rounds, medians")
        header = "| phase (µs/step) | " + " | ".join(f"batch {b}" for b in args.batches) + " |"
        rows: dict[str, list[str]] = defaultdict(list)
        for batch in args.batches:
            plain: list[float] = []
            phases: defaultdict[str, list[float]] = defaultdict(list)
            for r in range(args.rounds):
                plain.append(decode_steps(eng, batch, args.steps, f"p{batch}-{r}", None, clock))
                probe = Probe(clock)
                per_step = decode_steps(eng, batch, args.steps, f"i{batch}-{r}", probe, clock)
                s = {k: v / args.steps for k, v in probe.seconds.items()}
                measured = {
                    "schedule": s.get("schedule", 0.0),
                    "prepare": s.get("execute", 0.0) - s.get("forward", 0.0),
                    "forward": s.get("forward", 0.0),
                    "sample": s.get("sample", 0.0),
                    "detokenize": s.get("detokenize", 0.0),
                }
                measured["post-process"] = per_step - sum(measured.values())
                for k, v in measured.items():
                    phases[k].append(v)
                phases["step, instrumented"].append(per_step)
                phases["host (instrumented - forward)"].append(per_step - measured["forward"])
            plain_s = statistics.median(plain)
            for k in (*PHASES, "step, instrumented", "host (instrumented - forward)"):
                rows[k].append(f"{statistics.median(phases[k]) * 1e6:,.0f}")
            rows["step, plain"].append(f"{plain_s * 1e6:,.0f}")
        print(header)
        print("|---|" + "---|" * len(args.batches))
        for k, vals in rows.items():
            print(f"| {k} | " + " | ".join(vals) + " |")
        eng.close()


if __name__ == "__main__":
    main()
