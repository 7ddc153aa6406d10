"""Reading the CPU's model name and flags from /proc/cpuinfo's text."""

from __future__ import annotations

from pathlib import Path

from blink.engine.cpu_features import parse_cpuinfo, read_cpu_features

AMX_XEON = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz
flags\t\t: fpu sse2 avx2 avx512f avx512_vnni avx512_bf16 amx_bf16 amx_tile amx_int8

processor\t: 1
model name\t: ignored, the first processor's name is used
flags\t\t: fpu
"""


def test_model_name_and_flags_of_the_first_processor() -> None:
    cpu = parse_cpuinfo(AMX_XEON, cores=2)
    assert cpu.model_name == "Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz"
    assert cpu.native_bf16 and cpu.amx
    assert cpu.listed_flags() == ["amx_bf16", "amx_int8", "avx512_bf16", "avx512_vnni", "avx512f"]
    assert cpu.describe() == ("Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz "
                              "(amx_bf16, amx_int8, avx512_bf16, avx512_vnni, avx512f; 2 cores)")


def test_avx512_bf16_without_amx_is_native_bf16() -> None:
    cpu = parse_cpuinfo("model name : AMD EPYC\nflags : avx512f avx512_bf16 avx512_vnni\n", cores=2)
    assert cpu.native_bf16 and not cpu.amx
    assert cpu.describe() == "AMD EPYC (avx512_bf16, avx512_vnni, avx512f, no AMX; 2 cores)"


def test_no_cpuinfo_means_no_fast_paths(tmp_path: Path) -> None:
    cpu = read_cpu_features(tmp_path / "missing")
    assert cpu.model_name == "unknown CPU" and not cpu.flags and not cpu.native_bf16 and cpu.cores >= 1
    assert cpu.describe().startswith("unknown CPU (no AVX-512, no AMX;")


def test_this_machine_reads() -> None:
    cpu = read_cpu_features()
    assert cpu.cores >= 1 and cpu.model_name
