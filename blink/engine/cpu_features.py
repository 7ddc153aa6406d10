"""What this CPU can do fast, read once from /proc/cpuinfo: the input of the fast defaults.

Which configuration is fastest depends on the CPU (AMX makes bf16 GEMMs cheap; without native
bf16, bf16 is emulated and slower than fp32), so the choice is a pure function of these features
(blink/engine/fast_defaults.py), and benchmarks print the same line beside every figure.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

# The flags that change which configuration is fastest, in the order they are printed.
RELEVANT_FLAGS = ("amx_bf16", "amx_int8", "avx512_bf16", "avx512_vnni", "avx512f")


@dataclass(frozen=True)
class CpuFeatures:
    model_name: str
    flags: frozenset[str]
    cores: int

    @property
    def native_bf16(self) -> bool:
        """bf16 matmuls run in hardware (AVX512-BF16 or AMX), not emulated."""
        return bool({"avx512_bf16", "amx_bf16"} & self.flags)

    @property
    def amx(self) -> bool:
        return "amx_bf16" in self.flags

    def listed_flags(self) -> list[str]:
        return [f for f in RELEVANT_FLAGS if f in self.flags]

    def describe(self) -> str:
        """One line for logs and benchmark tables; says "no AMX" outright, since a figure taken
        without it does not hold on a CPU with it (and the other way round)."""
        flags = self.listed_flags() or ["no AVX-512"]
        if not self.amx:
            flags.append("no AMX")
        return f"{self.model_name} ({', '.join(flags)}; {self.cores} cores)"


def parse_cpuinfo(text: str, cores: int) -> CpuFeatures:
    """The first processor's model name and flags from /proc/cpuinfo's text."""
    model, flags = "unknown CPU", frozenset[str]()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "model name" and model == "unknown CPU":
            model = value.strip()
        elif key == "flags" and not flags:
            flags = frozenset(value.split())
    return CpuFeatures(model, flags, cores)


def read_cpu_features(cpuinfo: Path = Path("/proc/cpuinfo")) -> CpuFeatures:
    """This machine's features; no flags (the conservative choice) where /proc/cpuinfo is unreadable."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    try:
        text = cpuinfo.read_text()
    except OSError:
        text = ""
    return parse_cpuinfo(text, cores)
