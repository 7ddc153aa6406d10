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
  long as its recorded perplexity measurement passes its bound (``W8A8_QUALITY``); with AMX
  (oneDNN's AMX bf16 GEMMs beat the int8 path there) the dense bf16 weights
  (``int8-dense-prefill``). CPUs without native bf16 (AVX2-only, or AVX-512 without BF16) keep
  the checkpoint's dtype, unquantized. An explicit float32 means exact output is wanted, so
  nothing is quantized.
- threads: every core on machines with at most two (one engine thread there left prefill and
  decode far slower than two: benchmarks/real_model_defaults.py, figures in RESULTS.md; the
  gateway's share per token is small), else the engine's default (all cores but one or two,
  left to the gateway).
"""

from __future__ import annotations

from dataclasses import dataclass

from blink.engine.config import EngineConfig
from blink.engine.cpu_features import CpuFeatures


@dataclass(frozen=True)
class MeasuredQuality:
    """A mode's perplexity on real weights against fp32's, as benchmarks/real_model_quality.py
    measured it (the worse of its prefill and decode paths), and the bound it had to meet.

    A mode becomes a default only where the recorded measurement passed; rerunning that script
    prints whether the figures recorded here still hold, so the verdict is checked, not assumed.
    """

    mode: str
    increase: float  # relative perplexity increase over fp32, e.g. 0.0016 = +0.16%
    bound: float  # issue #22's bound for the mode
    measured: str  # where and on what
    # Share of the 50 chat prompts whose greedy answer is fp32's, word for word (None: not measured).
    # Perplexity can pass while the answers users read change: a default must keep most of them.
    agreement: float | None = None

    @property
    def passes(self) -> bool:
        return self.increase <= self.bound and (self.agreement is None or self.agreement >= MIN_AGREEMENT)

    def summary(self) -> str:
        verdict = "passes" if self.passes else "misses"
        agree = "" if self.agreement is None else f", {self.agreement:.0%} of answers as fp32's (min {MIN_AGREEMENT:.0%})"
        return f"{self.mode} {self.increase:+.2%} vs fp32, bound +{self.bound:.0%}{agree}: {verdict} ({self.measured})"


# A default keeps at least half of fp32's greedy answers word for word (bf16 alone keeps 76%,
# bf16 + int8-dense-prefill 74%: benchmarks/RESULTS.md).
MIN_AGREEMENT = 0.5


_WHERE = "SmolLM2-135M-Instruct, benchmarks/RESULTS.md 'Quality on real weights'"
# int8 weights (decode; also int8-dense-prefill's and int8-w8a8's decode path).
INT8_QUALITY = MeasuredQuality("int8", 0.0016, 0.01, _WHERE)
# W8A8 prefill, SmoothQuant-smoothed at engine start with the LM head kept weight-only and
# down_proj's many-row calls on its dense bf16 weight (layers/smoothing.py,
# linear_int8.W8A8_DENSE_KINDS); its decode path is int8's (+0.16%). Unsmoothed it measured
# +4.03%; smoothed with down_proj on W8A8 too, +1.42% but only 14 of 50 answers kept (it turned
# "What is the capital of France?" into a wrong one). With down_proj dense: prefill path 20.5142
# (fp32 20.5414), decode path int8's 20.5750 (+0.16%), 19 of 50 answers (2026-11-26 16:43 UTC,
# ``benchmarks/real_model_quality.py --tokens 1024 --new-tokens 16 --skip-spec --modes "bf16 +
# int8-w8a8"``; RESULTS.md). Still short of MIN_AGREEMENT, so still not a default.
W8A8_QUALITY = MeasuredQuality("int8-w8a8", 0.0016, 0.03, _WHERE, agreement=19 / 50)

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
