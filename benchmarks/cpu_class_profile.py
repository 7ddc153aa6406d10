"""Where Blink's CPU time goes on this CPU class, in one bounded run: the data issue #23 needs.

In-process (no server, no gateway), on a random SmolLM2-135M-shape bf16 checkpoint built here
(no downloads), with ``--threads`` torch threads on the cores this process may use. Prints one
markdown report, section by section as each finishes, and rewrites ``--out DIR/cpu_profile.md``
after each, so a run cut short still leaves what it measured:

  (0) the CPU line, torch/oneDNN build, and the C++ kernel build (timed; errors printed, not fatal);
  (a) Blink TTFT at ``--lengths`` for ``--quantization none|int8-dense-prefill|int8-w8a8`` x
      prefill attention ``kernel|sdpa`` (toggled on one engine per mode, alternating rounds);
  (b) ``transformers`` bf16 TTFT at the same lengths (the peer on the same machine);
  (c) batch-1 decode and ``--streams``-stream decode tok/s per mode, the int8 modes with the fused
      step (``decode_gemm_rows`` past its limit) and with the GEMM dispatch from 8 rows (AMX default),
      alternated over rounds;
  (d) a per-op profile (torch.profiler, self CPU, top 12) of one 1,024-token prefill and of
      decode steps of ``--streams`` rows for the configuration Blink picks for this CPU;
  (e) which oneDNN implementations ran (``ONEDNN_VERBOSE=1`` in a subprocess) for a bf16
      ``F.linear``, the pre-packed bf16 linear Blink uses, ``torch._int_mm``, oneDNN's int8
      matmul (W8A8's GEMM on AMX-INT8 CPUs) and bf16 SDPA;
  (f) a row sweep of one decode step's linears (SmolLM2's 120 layer linears, distinct weights):
      Blink's int8 GEMV vs oneDNN packed bf16 vs W8A8 ``_int_mm`` at 1-64 rows;
  (g) one layer's prefill attention, kernel vs SDPA, on one thread in thread CPU time.

    python benchmarks/cpu_class_profile.py --threads 2 --cores 0,1 --out /tmp/prof   (~3-4 min)
    python benchmarks/cpu_class_profile.py --quick --out /tmp/prof                   (~1 min)

``--cores`` pins the process after the kernels are built (the build uses every core it may);
under ``taskset`` leave it out. Figures taken on a loaded machine are indicative only.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from engine_cpu import build, hf_generate, rand_prompt  # noqa: E402
from engine_cpu import run_together as run  # noqa: E402

from blink.engine.config import EngineConfig  # noqa: E402
from blink.engine.cpu_features import read_cpu_features  # noqa: E402
from blink.engine.fast_defaults import choose_serving_config  # noqa: E402
from blink.engine.llm_engine import LLMEngine  # noqa: E402
from blink.engine.sampling_params import SamplingParams  # noqa: E402

MODES = ("none", "int8-dense-prefill", "int8-w8a8")


@dataclass
class Plan:
    lengths: list[int]
    ttft_reps: int
    rounds: int
    decode_tokens: int
    decode_reps: int
    streams: int
    stream_tokens: int
    gemm_rows: list[int]
    sweep_rows: list[int]
    profile_len: int


def plan(quick: bool, args: argparse.Namespace) -> Plan:
    if quick:
        return Plan([64, 256], 1, 1, 16, 1, 4, 16, [4], [1, 4, 16], 256)
    return Plan([int(n) for n in args.lengths.split(",")], 3, 2, 64, 3, args.streams, args.stream_tokens,
                [8], [1, 2, 4, 8, 16, 32, 64], 1024)


@dataclass
class Report:
    """The markdown report, printed and written out section by section."""

    out: Path | None
    parts: list[str] = field(default_factory=list)

    def add(self, text: str) -> None:
        self.parts.append(text.rstrip() + "\n")
        print(text.rstrip() + "\n", flush=True)
        if self.out is not None:
            self.out.mkdir(parents=True, exist_ok=True)
            (self.out / "cpu_profile.md").write_text("\n".join(self.parts))


class Warnings(logging.Handler):
    """Blink's warnings (a kernel that did not build says why there) kept for the report."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        msg = record.getMessage()
        if record.levelno >= logging.WARNING or "prefill attention" in msg or "decode steps of" in msg:
            self.lines.append(f"{record.levelname} {record.name}: {msg}"[:600])

    def take(self) -> list[str]:
        lines, self.lines = self.lines, []
        return lines


def section(report: Report, title: str, body: Callable[[], str]) -> None:
    """One section; its failure is printed and the run goes on to the next one."""
    t0 = time.perf_counter()
    try:
        text = body()
    except Exception:  # noqa: BLE001 - a benchmark reports what failed and keeps measuring
        text = "FAILED:\n```\n" + traceback.format_exc()[-3000:] + "```"
    report.add(f"### {title} ({time.perf_counter() - t0:.0f} s)\n\n{text}")


# -- the engine --------------------------------------------------------------------------------

def engine(path: Path, threads: int, quantization: str, **extra: object) -> LLMEngine:
    cfg = EngineConfig(model=str(path), dtype="bfloat16", threads=threads, max_model_len=2048,  # type: ignore[arg-type]
                       kv_cache_memory_bytes=256 << 20, max_num_batched_tokens=2048, max_num_seqs=64,
                       enable_prefix_caching=False, quantization=quantization, **extra)  # type: ignore[arg-type]
    return LLMEngine(cfg, path)


def ttft_ms(eng: LLMEngine, n: int, seed: int) -> float:
    t0, first, _ = run(eng, [rand_prompt(n, seed)], 1)
    return ((first or t0) - t0) * 1000


def decode_tok_s(eng: LLMEngine, p: Plan) -> float:
    rates = []
    for _ in range(p.decode_reps):
        t0, first, total = run(eng, [rand_prompt(32, 5)], p.decode_tokens)
        rates.append((total - 1) / (time.perf_counter() - (first or t0)))
    return statistics.median(rates)


def streams_tok_s(eng: LLMEngine, p: Plan) -> float:
    """Aggregate tok/s of ``streams`` requests of 32 prompt tokens run together (prefill included,
    as engine_vs_peers.py and the server-to-server figures count it)."""
    t0, _, total = run(eng, [rand_prompt(32, 7000 + i) for i in range(p.streams)], p.stream_tokens)
    return total / (time.perf_counter() - t0)


def set_prefill_attention(eng: LLMEngine, kernel: bool) -> None:
    """Switch every attention layer's fresh-prefill path (the caller checked the kernel runs)."""
    for attn in eng.runner.model.attention_layers():
        attn.prefill_kernel = kernel


def set_gemm_rows(eng: LLMEngine, rows: int) -> None:
    """The decode GEMM dispatch's threshold (model_runner._dispatch_decode_gemm), set after start."""
    runner = eng.runner
    runner.decode_gemm_rows = rows
    for m in runner.model.modules():
        if hasattr(m, "gemm_min_rows"):
            m.gemm_min_rows = rows or None


def kernel_usable(eng: LLMEngine) -> bool:
    from blink.engine.kernels.attention import prefill_kernel_available

    runner = eng.runner
    return bool(runner.decode_kernel and runner.dtype == torch.bfloat16 and prefill_kernel_available())


# -- sections ----------------------------------------------------------------------------------

def header(args: argparse.Namespace, threads: int) -> str:
    cpu = read_cpu_features()
    lines = [
        f"- CPU: {cpu.describe()}",
        f"- torch {torch.__version__}, CPU capability {torch.backends.cpu.get_cpu_capability()}, "
        f"oneDNN {'on' if torch.backends.mkldnn.is_available() else 'off'} "
        f"(bf16 {bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())}), Python {sys.version.split()[0]}",
        f"- threads {threads}, cores allowed {sorted(os.sched_getaffinity(0))}, "
        f"quick={args.quick}, ONEDNN_MAX_CPU_ISA={os.environ.get('ONEDNN_MAX_CPU_ISA', '-')}",
    ]
    return "\n".join(lines)


def build_kernels() -> str:
    from torch.utils import cpp_extension

    from blink.engine.kernels.attention import prefill_kernel_available
    from blink.engine.kernels.prebuild import build_all

    lines = [f"- ninja available: {cpp_extension.is_ninja_available()}; "
             f"compiler: {os.environ.get('CXX', 'c++')}"]
    t0 = time.perf_counter()
    usable = build_all()
    usable["prefill_attention (AVX512-BF16)"] = prefill_kernel_available()
    lines.append(f"- built/loaded in {time.perf_counter() - t0:.1f} s: "
                 + ", ".join(f"{k} {'ok' if v else 'UNAVAILABLE'}" for k, v in usable.items()))
    return "\n".join(lines)


@dataclass
class Engines:
    """One engine per mode, started on first use and shared by the sections (a start is seconds)."""

    path: Path
    threads: int
    started: dict[str, LLMEngine] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)

    def get(self, mode: str) -> LLMEngine | None:
        if mode not in self.started and mode not in self.failed:
            try:
                self.started[mode] = engine(self.path, self.threads, mode)
            except Exception as exc:  # noqa: BLE001 - reported in the section, the others still run
                self.failed[mode] = f"{type(exc).__name__}: {exc}"[:400]
        return self.started.get(mode)


def ttft_matrix(engines: Engines, p: Plan, log: Warnings) -> str:
    rows = [f"| mode | attention | {' | '.join(f'TTFT @ {n} ms' for n in p.lengths)} |",
            "|---|---|" + "---|" * len(p.lengths)]
    notes: list[str] = []
    for mode in MODES:
        eng = engines.get(mode)
        if eng is None:
            notes.append(f"- {mode}: engine failed to start: {engines.failed[mode]}")
            continue
        chosen = "kernel" if eng.runner.prefill_kernel else "sdpa"
        usable = kernel_usable(eng)
        notes.append(f"- {mode}: auto prefill attention = {chosen}; kernel usable: {usable}; "
                     f"fused decode: {eng.runner.fused_decode}; decode_gemm_rows (auto): "
                     f"{getattr(eng.runner, 'decode_gemm_rows', 'n/a')}")
        run(eng, [rand_prompt(16, 99)], 2)
        samples: dict[str, dict[int, list[float]]] = {a: {n: [] for n in p.lengths} for a in ("kernel", "sdpa")}
        for _ in range(p.rounds):
            for attn in ("kernel", "sdpa"):
                if attn == "kernel" and not usable:
                    continue
                set_prefill_attention(eng, attn == "kernel")
                ttft_ms(eng, p.lengths[-1], 1)  # warm this path at the longest length
                for n in p.lengths:
                    samples[attn][n] += [ttft_ms(eng, n, 1000 * n + i) for i in range(p.ttft_reps)]
        set_prefill_attention(eng, chosen == "kernel")
        for attn, by_len in samples.items():
            if by_len[p.lengths[0]]:
                cells = " | ".join(f"{statistics.median(by_len[n]):.1f}" for n in p.lengths)
                rows.append(f"| {mode} | {attn} | {cells} |")
    notes += [f"- log: {line}" for line in log.take()]
    return "\n".join(rows + [""] + notes)


def transformers_ttft(path: Path, p: Plan) -> str:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16).eval()
    hf_generate(model, [rand_prompt(16, 99)], 1)
    hf_generate(model, [rand_prompt(p.lengths[-1], 1)], 1)
    cells = " | ".join(
        f"{statistics.median(hf_generate(model, [rand_prompt(n, 1000 * n + i)], 1) * 1000 for i in range(p.ttft_reps)):.1f}"
        for n in p.lengths)
    attn = getattr(model.config, "_attn_implementation", "?")
    return (f"| peer | {' | '.join(f'TTFT @ {n} ms' for n in p.lengths)} |\n|---|" + "---|" * len(p.lengths)
            + f"\n| transformers bf16 (attn {attn}) | {cells} |")


def decode_figures(engines: Engines, p: Plan, log: Warnings) -> str:
    """Batch-1 and many-stream decode per mode; the int8 modes' decode paths for wide steps (the
    fused step, the GEMM from a few row counts) alternated over ``p.rounds`` rounds, median."""
    rows = [f"| mode | decode path for {p.streams} rows | batch-1 decode tok/s | {p.streams}-stream tok/s (median of {p.rounds}) |",
            "|---|---|---|---|"]
    for mode in MODES:
        eng = engines.get(mode)
        if eng is None:
            rows.append(f"| {mode} | engine failed: {engines.failed[mode]} | | |")
            continue
        runner = eng.runner
        auto_rows = getattr(runner, "decode_gemm_rows", 0)
        b1 = decode_tok_s(eng, p)
        variants: list[tuple[str, int]] = [("as started", auto_rows)]
        if auto_rows and runner.fused_decode:
            variants = [("fused step", 10_000)] + [(f"GEMM from {r} rows", r) for r in p.gemm_rows]
        rates: dict[str, list[float]] = {label: [] for label, _ in variants}
        for _ in range(p.rounds):
            for label, rows_setting in variants:
                if auto_rows:
                    set_gemm_rows(eng, rows_setting)
                run(eng, [rand_prompt(32, 7000 + i) for i in range(p.streams)], 4)  # warm this path
                rates[label].append(streams_tok_s(eng, p))
        if auto_rows:
            set_gemm_rows(eng, auto_rows)
        for label, got in rates.items():
            spread = f" ({min(got):.0f}-{max(got):.0f})" if len(got) > 1 else ""
            rows.append(f"| {mode} | {label} | {b1:.1f} | {statistics.median(got):.1f}{spread} |")
    return "\n".join(rows + [f"- log: {line}" for line in log.take()])


def profiles(engines: Engines, p: Plan) -> str:
    from torch.profiler import ProfilerActivity, profile

    cpu = read_cpu_features()
    auto = choose_serving_config("auto", "auto", engines.threads, "cpu", cpu, engines.threads).quantization
    eng = engines.get(auto)
    if eng is None:
        return f"auto mode {auto}: engine failed to start: {engines.failed[auto]}"
    out = [f"Auto config for this CPU: quantization={auto}, prefill attention="
           f"{'kernel' if eng.runner.prefill_kernel else 'sdpa'}, decode_gemm_rows="
           f"{getattr(eng.runner, 'decode_gemm_rows', 'n/a')}"]
    ttft_ms(eng, p.profile_len, 998)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        ms = ttft_ms(eng, p.profile_len, 999)
    out.append(f"\nOne {p.profile_len}-token prefill ({ms:.0f} ms wall under the profiler), self CPU top 12:\n```\n"
               + prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12) + "\n```")
    out.append(decode_step_profile(eng, p, f"{auto} (auto)"))
    if auto != "none" and (bf16 := engines.get("none")) is not None:
        out.append(decode_step_profile(bf16, p, "none (bf16, eager)"))
    return "\n".join(out)


def decode_step_profile(eng: LLMEngine, p: Plan, label: str) -> str:
    """Self-CPU profile of decode steps of ``p.streams`` rows, and the runner's share of them."""
    from torch.profiler import ProfilerActivity, profile, record_function

    prompts = [rand_prompt(32, 8000 + i) for i in range(p.streams)]
    for i, pr in enumerate(prompts):
        eng.add_request(f"prof-{time.perf_counter_ns()}-{i}", pr,
                        SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True))
    for _ in range(4):  # prefill the streams and reach steady decode
        eng.step()
    runner, steps = eng.runner, 8
    in_runner = 0.0
    real_execute = runner.execute

    def timed_execute(scheduled):  # type: ignore[no-untyped-def]
        nonlocal in_runner
        t = time.perf_counter()
        try:
            # A named row: the fused C++ step is a custom-class call the profiler records no op for.
            with record_function("model_runner.execute (incl. fused step)"):
                return real_execute(scheduled)
        finally:
            in_runner += time.perf_counter() - t

    runner.execute = timed_execute  # type: ignore[method-assign]
    try:
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            t0 = time.perf_counter()
            for _ in range(steps):
                eng.step()
            wall = time.perf_counter() - t0
    finally:
        del runner.execute
    while eng.has_unfinished():
        eng.step()
    return (f"\n{label}: {steps} decode steps of {p.streams} rows, {wall / steps * 1000:.1f} ms per step under the "
            f"profiler, {in_runner / wall:.0%} of it in the model runner's forward (the rest: scheduler, "
            f"sampler, outputs). Self CPU top 10:\n```\n"
            + prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=10) + "\n```")


_ONEDNN_CHILD = r"""
import statistics, sys, time, torch, torch.nn.functional as F
torch.set_num_threads(int(sys.argv[1]))
torch.manual_seed(0)
def timed(label, fn):
    print("@@ " + label, flush=True)
    fn()
    print("@@ timing", flush=True)  # the warm-up's verbose lines above are counted, these not
    ts = []
    for _ in range(9):
        t = time.perf_counter(); fn(); ts.append(time.perf_counter() - t)
    print(f"@@ ms {label}={statistics.median(ts) * 1000:.3f}", flush=True)
x = torch.randn(1024, 576, dtype=torch.bfloat16)
w = torch.randn(1536, 576, dtype=torch.bfloat16)
timed("bf16 F.linear 1024x576x1536", lambda: F.linear(x, w))
packed = torch.ops.mkldnn._reorder_linear_weight(w)
timed("bf16 packed linear 1024x576x1536", lambda: torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], ""))
x16 = x[:16].contiguous()
timed("bf16 packed linear 16x576x1536", lambda: torch.ops.mkldnn._linear_pointwise(x16, packed, None, "none", [], ""))
xi = torch.randint(-127, 128, (1024, 576), dtype=torch.int8)
wi = torch.randint(-127, 128, (1536, 576), dtype=torch.int8)
timed("torch._int_mm 1024x576x1536", lambda: torch._int_mm(xi, wi.t()))
xi32 = xi[:32].contiguous()
timed("torch._int_mm 32x576x1536", lambda: torch._int_mm(xi32, wi.t()))
# int8-w8a8's GEMM on AMX-INT8 CPUs (kernels/w8a8.py): oneDNN's matmul primitive, uint8 codes + 128.
xu, packed_i = (xi.to(torch.int16) + 128).to(torch.uint8), torch.ops.onednn.qlinear_prepack(wi, None)
ones, zeros = torch.ones(1536), torch.zeros(1536, dtype=torch.long)
timed("oneDNN qlinear u8 1024x576x1536", lambda: torch.ops.onednn.qlinear_pointwise(
    xu, 1.0, 128, packed_i, ones, zeros, None, 1.0, 0, torch.float32, "none", [], ""))
q = torch.randn(1, 9, 1024, 64, dtype=torch.bfloat16)
kv = torch.randn(1, 3, 1024, 64, dtype=torch.bfloat16)
timed("bf16 SDPA causal 9/3 heads x 1024", lambda: F.scaled_dot_product_attention(q, kv, kv, is_causal=True, enable_gqa=True))
"""


def _onednn_child(threads: int, isa: str) -> tuple[dict[str, Counter[str]], dict[str, float], list[str], str]:
    """(label -> implementation counts, label -> ms, first exec lines, error) of one child run,
    with oneDNN capped at ``isa`` (ONEDNN_MAX_CPU_ISA; "" = what the CPU has)."""
    env = {**os.environ, "ONEDNN_VERBOSE": "1", "DNNL_VERBOSE": "1"}
    if isa:
        env["ONEDNN_MAX_CPU_ISA"] = env["DNNL_MAX_CPU_ISA"] = isa
    proc = subprocess.run([sys.executable, "-c", _ONEDNN_CHILD, str(threads)], env=env, text=True,
                          capture_output=True, timeout=120, check=False)
    counts: dict[str, Counter[str]] = {}
    ms: dict[str, float] = {}
    label, counting = "start", True
    samples: list[str] = []
    for line in proc.stdout.splitlines():
        if line.startswith("@@ ms "):
            name, _, value = line[6:].rpartition("=")
            ms[name] = float(value)
        elif line == "@@ timing":
            counting = False
        elif line.startswith("@@ "):
            label, counting = line[3:], True
            counts.setdefault(label, Counter())
        parts = line.split(",")
        if counting and line.startswith(("onednn_verbose", "dnnl_verbose")) and "exec" in parts:
            i = parts.index("exec")
            # exec,<engine>,<primitive kind>,<implementation>,...
            kind, impl = (parts[i + 2], parts[i + 3] or "(unnamed)") if len(parts) > i + 3 else ("?", "?")
            counts.setdefault(label, Counter())[f"{kind}: {impl}"] += 1
            if len(samples) < 6:
                samples.append(line[:260])
    error = "" if proc.returncode == 0 else f"exit {proc.returncode}: {proc.stderr[-1500:]}"
    return counts, ms, samples, error


def onednn_implementations(threads: int) -> str:
    """Which oneDNN implementations run, and each op's time with oneDNN capped below AMX: the
    ``_int_mm`` path goes through oneDNN's gemm API, whose verbose line names no implementation,
    so the capped run's time is what says whether AMX served it."""
    counts, ms, samples, error = _onednn_child(threads, "")
    capped_isa = "AVX512_CORE_BF16"
    _, capped, _, capped_error = _onednn_child(threads, capped_isa)
    out = [f"| op (warm-up call) | oneDNN primitive: implementation (count) | ms | ms with oneDNN capped at {capped_isa} |",
           "|---|---|---|---|"]
    for lab, c in counts.items():
        impls = "; ".join(f"{k} ({n})" for k, n in c.most_common()) or "no oneDNN primitive"
        out.append(f"| {lab} | {impls} | {ms.get(lab, float('nan')):.3f} | {capped.get(lab, float('nan')):.3f} |")
    out.append("\nFirst exec lines:\n```\n" + "\n".join(samples) + "\n```")
    out += [f"child error: {e}" for e in (error, capped_error) if e]
    return "\n".join(out)


def row_sweep(threads: int, p: Plan) -> str:
    """ms per decode step of SmolLM2's 120 layer linears (distinct weights: cold, as in decode)."""
    from blink.engine.kernels.int8_gemv import int8_gemv_available
    from blink.engine.kernels.w8a8 import w8a8_available, w8a8_linear
    from blink.engine.layers.linear_int8 import Int8Linear
    from blink.engine.layers.packed_linear import packed_linear

    shapes = [(960, 576), (576, 576), (3072, 576), (576, 1536)]  # qkv, o, gate_up, down
    gen = torch.Generator().manual_seed(0)
    layers = [Int8Linear(torch.randn(n, k, generator=gen, dtype=torch.float32).to(torch.bfloat16) * 0.05, None,
                         keep_dense=True, gemv=int8_gemv_available(), w8a8=w8a8_available())
              for _ in range(30) for n, k in shapes]
    for m in layers:
        m.prepack()
    paths: dict[str, Callable[[Int8Linear, torch.Tensor], torch.Tensor]] = {}
    if int8_gemv_available():
        paths["Blink int8 GEMV (fused step's kind)"] = lambda m, x: torch.ops.blink.int8_gemv(x, m.qweight, m.scales)
    if layers[0].packed_dense is not None:
        paths["oneDNN packed bf16"] = lambda m, x: packed_linear(x, m.packed_dense, None)
    paths["aten _weight_int8pack_mm"] = lambda m, x: torch.ops.aten._weight_int8pack_mm(x, m.qweight, m.scales)
    if w8a8_available():
        paths["W8A8 _int_mm + Blink quantize/dequant"] = (
            lambda m, x: w8a8_linear(x, m.w8a8_weight, m.w_scales, None, False))
    xs = {k: torch.randn(max(p.sweep_rows), k, generator=gen).to(torch.bfloat16) for k in (576, 1536)}
    out = [f"| rows | {' | '.join(paths)} |", "|---|" + "---|" * len(paths)]
    with torch.inference_mode():
        for rows in p.sweep_rows:
            cells = []
            for fn in paths.values():
                times = []
                for _ in range(3):
                    t0 = time.perf_counter()
                    for m in layers:
                        fn(m, xs[m.in_features][:rows])
                    times.append(time.perf_counter() - t0)
                cells.append(f"{min(times[1:]) * 1000:.2f}")
            out.append(f"| {rows} | {' | '.join(cells)} |")
    return "\n".join(out + ["", "ms per step (min of 2 after a warm-up pass), all 120 linears of one step."])


def attention_micro(p: Plan) -> str:
    """One layer's fresh-prefill attention (SmolLM2's 9/3 heads x 64), kernel vs SDPA, on one
    thread and timed in thread CPU time, which a loaded machine disturbs far less than wall time."""
    from blink.engine.kernels.attention import prefill_kernel_available
    from blink.engine.layers.attention import PagedAttention, PrefillChunk

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    paths = ["sdpa"] + (["kernel"] if prefill_kernel_available() else [])
    out = ["| tokens | " + " | ".join(f"{a} ms" for a in paths) + " | sdpa / kernel |", "|---|" + "---|" * (len(paths) + 1)]
    try:
        for n in p.lengths:
            g = torch.Generator().manual_seed(n)
            q = torch.randn(n, 9, 64, generator=g).to(torch.bfloat16)
            k, v = (torch.randn(n, 3, 64, generator=g).to(torch.bfloat16) for _ in range(2))
            chunk = PrefillChunk(start=0, end=n, context_len=0)
            ms: dict[str, float] = {}
            for attn in paths:
                layer = PagedAttention(9, 3, 64, 64**-0.5)
                layer.prefill_kernel = attn == "kernel"
                times = []
                for _ in range(6):
                    t0 = time.thread_time()
                    layer._prefill(q, k, v, chunk)
                    times.append(time.thread_time() - t0)
                ms[attn] = min(times[1:]) * 1000
            ratio = f"{ms['sdpa'] / ms['kernel']:.2f}" if "kernel" in ms else "-"
            out.append(f"| {n} | " + " | ".join(f"{ms[a]:.2f}" for a in paths) + f" | {ratio} |")
    finally:
        torch.set_num_threads(before)
    return "\n".join(out)


def underflow_micro(p: Plan) -> str:
    """What a subnormal costs this CPU, and whether Blink's attention kernels pay it.

    Intel cores take a microcode assist for each vector op that makes or reads a subnormal; AMD
    cores do not. A softmax whose scores sit far below their row max is where kernels make them
    (most of a random model's causal scores do), so the kernels flush exp's results under FLT_MIN
    to 0 (kernels/simd_exp.h). Rows: aten's multiply on subnormal vs normal floats (the CPU's
    penalty), then the decode and prefill attention kernels with narrow vs wide score spreads
    (their exposure: about 1x when no subnormal is made). One thread, thread CPU time, min of reps.
    """
    from blink.engine.kernels.attention import (
        decode_attention_cpu,
        decode_kernel_available,
        prefill_attention_cpu,
        prefill_kernel_available,
    )

    before = torch.get_num_threads()
    torch.set_num_threads(1)

    def best(fn: Callable[[], object], reps: int) -> float:
        fn()
        times = []
        for _ in range(reps):
            t0 = time.thread_time()
            fn()
            times.append(time.thread_time() - t0)
        return min(times) * 1000

    out = ["| op | narrow (ms) | wide / subnormal (ms) | ratio |", "|---|---|---|---|"]
    try:
        normal, tiny = torch.full((1 << 20,), 1e-30), torch.full((1 << 20,), 1e-39)
        a, b = best(lambda: normal * 0.5, 20), best(lambda: tiny * 0.5, 20)
        out.append(f"| aten mul, 1M fp32 (normal vs subnormal) | {a:.3f} | {b:.3f} | {b / a:.2f} |")
        reps = 3 if p.ttft_reps <= 1 else 10
        if decode_kernel_available():
            for ctx in (256, 1024):
                times = []
                for spread in (1.0, 12.0):
                    g = torch.Generator().manual_seed(ctx)
                    blocks = ctx // 16
                    k = (torch.randn(16 * blocks, 16, 3, 64, generator=g) * spread).bfloat16()
                    v = torch.randn(16 * blocks, 16, 3, 64, generator=g).bfloat16()
                    q = (torch.randn(16, 9, 64, generator=g) * spread).bfloat16()
                    tables, lens = torch.arange(16 * blocks).view(16, blocks), torch.full((16,), ctx)
                    times.append(best(functools.partial(decode_attention_cpu, q, k, v, tables, lens, 0.125), reps))
                out.append(f"| decode attention 16 x {ctx} (spread 1 vs 12) | {times[0]:.3f} | {times[1]:.3f} | "
                           f"{times[1] / times[0]:.2f} |")
        if prefill_kernel_available():
            times = []
            for spread in (1.0, 12.0):
                g = torch.Generator().manual_seed(3)
                q = (torch.randn(1024, 9, 64, generator=g) * spread).bfloat16()
                k = (torch.randn(1024, 3, 64, generator=g) * spread).bfloat16()
                v = torch.randn(1024, 3, 64, generator=g).bfloat16()
                times.append(best(functools.partial(prefill_attention_cpu, q, k, v, 0.125), max(2, reps // 2)))
            out.append(f"| prefill attention 1024 (spread 1 vs 12) | {times[0]:.3f} | {times[1]:.3f} | "
                       f"{times[1] / times[0]:.2f} |")
    finally:
        torch.set_num_threads(before)
    return "\n".join(out)


@contextlib.contextmanager
def captured_warnings() -> Iterator[Warnings]:
    handler = Warnings()
    root = logging.getLogger("blink")
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        yield handler
    finally:
        root.removeHandler(handler)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--cores", default="", help="pin to these cores (e.g. 0,1) after building the kernels")
    ap.add_argument("--lengths", default="256,1024")
    ap.add_argument("--streams", type=int, default=16)
    ap.add_argument("--stream-tokens", type=int, default=64)
    ap.add_argument("--out", default="", help="also write DIR/cpu_profile.md (rewritten after each section)")
    ap.add_argument("--quick", action="store_true", help="tiny run (~1 min) to check the script works")
    ap.add_argument("--skip", default="", help="comma list of sections to skip: ttft,hf,decode,profile,onednn,attention,underflow,sweep")
    args = ap.parse_args()
    p = plan(args.quick, args)
    skip = set(filter(None, args.skip.split(",")))
    report = Report(Path(args.out) if args.out else None)
    started = time.perf_counter()
    report.add("## Blink CPU-class profile (benchmarks/cpu_class_profile.py)")
    with captured_warnings() as log:
        section(report, "Kernels", lambda: build_kernels() + "".join(f"\n- log: {ln}" for ln in log.take()))
        if args.cores:
            os.sched_setaffinity(0, {int(c) for c in args.cores.split(",")})
        torch.set_num_threads(args.threads)
        section(report, "Machine", lambda: header(args, args.threads))
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            path = build("smollm2-135m", Path(tmp), "bfloat16")
            report.add(f"(random SmolLM2-135M-shape bf16 checkpoint built in {time.perf_counter() - t0:.0f} s)")
            engines = Engines(path, args.threads)
            if "ttft" not in skip:
                section(report, "(a) Blink TTFT: mode x prefill attention (median)",
                        lambda: ttft_matrix(engines, p, log))
            if "hf" not in skip:
                section(report, "(b) transformers bf16 TTFT (median)", lambda: transformers_ttft(path, p))
            if "decode" not in skip:
                section(report, f"(c) decode: batch-1 ({p.decode_tokens} tokens, median of {p.decode_reps}) and "
                        f"{p.streams} streams x {p.stream_tokens} tokens (prefill included)",
                        lambda: decode_figures(engines, p, log))
            if "profile" not in skip:
                section(report, "(d) per-op profile, auto configuration",
                        lambda: profiles(engines, p))
            engines.started.clear()
        if "onednn" not in skip:
            section(report, "(e) oneDNN implementations (ONEDNN_VERBOSE=1, subprocess)",
                    lambda: onednn_implementations(args.threads))
        if "attention" not in skip:
            section(report, "(g) prefill attention of one layer, 1 thread, thread CPU time (min of 5)",
                    lambda: attention_micro(p))
        if "underflow" not in skip:
            section(report, "(h) subnormals: the CPU's penalty and the attention kernels' exposure",
                    lambda: underflow_micro(p))
        if "sweep" not in skip:
            section(report, "(f) decode-step linears by row count (ms per step)", lambda: row_sweep(args.threads, p))
    report.add(f"(total {time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
