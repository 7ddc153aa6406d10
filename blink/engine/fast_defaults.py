"""The configuration ``blink serve --model M`` runs with when no flag says otherwise.

Users run the defaults, so the defaults must be the fastest configuration whose quality was
measured to hold on real weights (benchmarks/real_model_quality.py; figures and CPU in
benchmarks/RESULTS.md, "Quality on real weights"). What is fastest depends on the CPU, so the
choice is a pure function of its features (blink/engine/cpu_features.py) and of what the user
set: anything set explicitly is kept as it is; only ``dtype="auto"``, ``quantization="auto"`` and
``threads=0`` are chosen here.

- dtype: bfloat16 where the CPU computes it natively (AVX512-BF16 or AMX); elsewhere bf16 is
  emulated and slower than the checkpoint's own dtype, which "auto" then keeps.
- quantization, only when the compute dtype is bf16 on an AVX-512 CPU (where the int8 kernels
  and the fused decode step run): int8 weights for decode, which is bandwidth bound. Prefill:
  W8A8 (``int8-w8a8``, smoothed at engine start: layers/smoothing.py) on CPUs without AMX, as
  long as its recorded measurement passes (``W8A8_QUALITY``: perplexity within its bound, and
  under every protocol measured no significant loss of answers against the int8 weights that
  every quantized default decodes with: see ``MeasuredQuality.passes``); else, and with AMX
  (oneDNN's AMX bf16 GEMMs beat the int8 path there), the dense bf16 weights
  (``int8-dense-prefill``). CPUs without
  native bf16 (AVX2-only, or AVX-512 without BF16) keep the checkpoint's dtype, unquantized. An
  explicit float32 means exact output is wanted, so nothing is quantized.
- threads: every core on machines with at most two (one engine thread there left prefill and
  decode far slower than two: benchmarks/real_model_defaults.py, figures in RESULTS.md; the
  gateway's share per token is small), else the engine's default (all cores but one or two,
  left to the gateway).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from blink.engine.config import EngineConfig
from blink.engine.cpu_features import CpuFeatures


@dataclass(frozen=True)
class Agreement:
    """Greedy answers word for word fp32's (transformers, same weights) under one protocol: the
    mode's, bf16 alone's and the int8 weights', counted in the same run.

    The absolute count moves with the protocol (how many sequences share a step changes the
    batch shapes, hence the rounding, and in mixed steps which path decode rows take), so a bar
    on it compares figures taken under different protocols; a mode is judged only against the
    int8 weights' count under the same protocol (``MeasuredQuality.answers_lost``).
    """

    protocol: str  # e.g. "max-num-seqs 1"
    mode: int
    bf16: int
    prompts: int
    int8: int | None = None  # the int8 weights' count in the same run (None: not measured)

    @property
    def relative(self) -> float:
        return self.mode / self.bf16 if self.bf16 else 0.0


@dataclass(frozen=True)
class MeasuredQuality:
    """A mode's quality on real weights as benchmarks/real_model_quality.py measured it: its
    perplexity against fp32's (the worse of its prefill and decode paths) and the bound it had to
    meet, and, for modes that change the answers more than weight rounding does, its greedy
    agreement per protocol and the simple factual questions it answers right.

    A mode becomes a default only where the recorded measurement passed; rerunning that script
    prints whether the figures recorded here still hold, so the verdict is checked, not assumed.
    """

    mode: str
    increase: float  # relative perplexity increase over fp32, e.g. 0.0016 = +0.16%
    bound: float  # issue #22's bound for the mode
    measured: str  # where and on what
    # Perplexity can pass while the answers users read change: per protocol, the answers kept
    # (empty: not measured, perplexity alone decides).
    agreement: tuple[Agreement, ...] = ()
    # (right, asked) over real_model_quality.QUICKSTART's turns that fp32 answers right (None:
    # not measured); each one wrong where int8 is right counts as a lost answer.
    quickstart: tuple[int, int] | None = None

    @property
    def passes(self) -> bool:
        return self.increase <= self.bound and all(self.answers_lost(a) < SIGNIFICANT_LOSS for a in self.agreement)

    def answers_lost(self, a: Agreement) -> int:
        """Answers this mode loses against the int8 weights under ``a``'s protocol: fp32's greedy
        answers it no longer gives, plus quickstart questions it gets wrong that int8 gets right.
        Unknown (no int8 count recorded) counts as lost beyond the bar."""
        if a.int8 is None:
            return SIGNIFICANT_LOSS
        quick = 0 if self.quickstart is None else INT8_QUICKSTART_RIGHT - self.quickstart[0]
        return max(0, a.int8 - a.mode) + max(0, quick)

    def summary(self) -> str:
        verdict = "passes" if self.passes else "misses"
        agree = "".join(
            f", {a.protocol}: {a.mode}/{a.prompts} answers as fp32's, {a.relative:.0%} of bf16's {a.bf16}"
            for a in self.agreement)
        if self.agreement:
            lost = ", ".join(str(self.answers_lost(a)) for a in self.agreement)
            agree += f"; answers lost against int8 weights {lost} (a loss of {SIGNIFICANT_LOSS} could be significant)"
        quick = "" if self.quickstart is None else f", quickstart {self.quickstart[0]}/{self.quickstart[1]} right"
        return f"{self.mode} {self.increase:+.2%} vs fp32, bound +{self.bound:.0%}{agree}{quick}: {verdict} ({self.measured})"


# The guard on answers (benchmarks/RESULTS.md, "Agreement under one protocol"). How many of fp32's
# greedy answers a mode keeps word for word moves with batch composition, so a mode is compared
# with a reference measured in the same run, under the same protocols (one request at a time, and
# 16 sequences per step). The reference is the int8 weights: every quantized default already
# decodes with them, so what is asked of a prefill mode is that it loses no answers beyond theirs.
# With 50 prompts, "no loss" is judged by a sign test, not a hand-set share: if k answers are lost
# and none gained, the chance of that under "no difference" is 0.5**k, so a loss can only be
# significant at the 5% level from SIGNIFICANT_LOSS answers on (quickstart questions the mode gets
# wrong and int8 right count as lost answers too). Smaller losses are within what rounding noise
# alone produces on a 135M model, whose greedy answers flip between bf16 runs of different batch
# shapes (bf16 alone kept 37 vs 39 of 50 under the two protocols).
SIGNIFICANCE = 0.05
SIGNIFICANT_LOSS = math.ceil(math.log(SIGNIFICANCE) / math.log(0.5))


_WHERE = "SmolLM2-135M-Instruct, benchmarks/RESULTS.md 'Quality on real weights'"
# int8 weights (decode; also int8-dense-prefill's and int8-w8a8's decode path).
INT8_QUALITY = MeasuredQuality("int8", 0.0016, 0.01, _WHERE)
# Quickstart questions the int8 weights answer right (all 9 that fp32 answers right; same run as
# W8A8_QUALITY's answers).
INT8_QUICKSTART_RIGHT = 9
# W8A8 prefill, SmoothQuant-smoothed at engine start with the LM head kept weight-only and
# down_proj's many-row calls on its dense bf16 weight (layers/smoothing.py,
# linear_int8.W8A8_DENSE_KINDS); its decode path is int8's. Perplexity: prefill path 20.5142 (fp32
# 20.5414), decode path int8's 20.5750, so +0.16% (``real_model_quality.py --tokens 1024
# --skip-spec``). Answers: ``real_model_quality.py --new-tokens 16 --skip-spec --skip-perplexity
# --max-num-seqs 1,16``: 20 and 21 of 50 kept where the int8 weights keep 23 and 23 (bf16 alone 37
# and 39), and 8 of the 9 quickstart questions right in-process ("Who wrote Hamlet?" without the
# name; through ``blink serve`` all served questions were right): 4 and 3 answers lost, under the
# bar. W8A8 on every projection (the mode before) lost 5 + 2 = 7 and answered the README's France
# and Italy questions wrongly.
W8A8_QUALITY = MeasuredQuality(
    "int8-w8a8", 0.0016, 0.03, _WHERE,
    agreement=(Agreement("max-num-seqs 1", 20, 37, 50, int8=23), Agreement("max-num-seqs 16", 21, 39, 50, int8=23)),
    quickstart=(8, 9),
)

# Machines this small give the engine every core (see the module docstring).
_ALL_CORES_UP_TO = 2


@dataclass(frozen=True)
class ServingChoice:
    """The engine settings to run with, and which of them were chosen rather than given."""

    dtype: str
    quantization: str
    threads: int
    chosen: tuple[str, ...]
    cpu: CpuFeatures

    def apply(self, config: EngineConfig) -> EngineConfig:
        """``config``'s engine settings with this choice in place of what was left to Blink."""
        return EngineConfig.model_validate(
            config.engine_fields() | {"dtype": self.dtype, "quantization": self.quantization, "threads": self.threads})

    def line(self) -> str:
        """One line for the start-up log: the configuration and what it was chosen for."""
        picked = f"chosen for {self.cpu.describe()}" if self.chosen else "all set explicitly"
        auto = f" (auto: {', '.join(self.chosen)})" if self.chosen else ""
        return (f"engine configuration: dtype={self.dtype} quantization={self.quantization} "
                f"threads={self.threads}{auto}; {picked}")


def choose_serving_config(
    dtype: str,
    quantization: str,
    threads: int,
    device: str,
    cpu: CpuFeatures,
    default_threads: int,
    w8a8_passes: bool = W8A8_QUALITY.passes,
) -> ServingChoice:
    """Fill in what the user left to Blink ("auto", "auto", 0) for ``cpu``; keep the rest."""
    chosen: list[str] = []
    on_cpu = device == "cpu"
    if dtype == "auto" and on_cpu and cpu.native_bf16:
        dtype = "bfloat16"
        chosen.append("dtype")
    if quantization == "auto":
        quantization = _quantization(dtype, on_cpu, cpu, w8a8_passes)
        chosen.append("quantization")
    if threads == 0:
        threads = cpu.cores if cpu.cores <= _ALL_CORES_UP_TO else default_threads
        chosen.append("threads")
    return ServingChoice(dtype, quantization, threads, tuple(chosen), cpu)


def _quantization(dtype: str, on_cpu: bool, cpu: CpuFeatures, w8a8_passes: bool) -> str:
    if not (on_cpu and dtype == "bfloat16" and "avx512f" in cpu.flags and INT8_QUALITY.passes):
        return "none"
    if cpu.amx or not w8a8_passes:
        return "int8-dense-prefill"
    return "int8-w8a8"
