"""The fast defaults: a pure function from the CPU's features and the user's settings to the engine's."""

from __future__ import annotations

from blink.engine.cpu_features import CpuFeatures
from blink.engine.fast_defaults import (
    INT8_QUALITY,
    MIN_RELATIVE_AGREEMENT,
    W8A8_QUALITY,
    Agreement,
    MeasuredQuality,
    choose_serving_config,
)

AMX = CpuFeatures("Intel Xeon (AMX)", frozenset({"avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16", "amx_int8"}), 2)
AVX512_BF16 = CpuFeatures("AMD EPYC", frozenset({"avx512f", "avx512_vnni", "avx512_bf16"}), 2)
AVX512_ONLY = CpuFeatures("Intel Xeon (Skylake)", frozenset({"avx512f", "avx512_vnni"}), 4)
AVX2 = CpuFeatures("laptop", frozenset({"avx2"}), 8)


def choose(cpu: CpuFeatures, dtype: str = "auto", quantization: str = "auto", threads: int = 0, device: str = "cpu",
           w8a8_passes: bool = False):
    return choose_serving_config(dtype, quantization, threads, device, cpu, default_threads=1, w8a8_passes=w8a8_passes)


def test_amx_gets_bf16_int8_decode_and_dense_bf16_prefill() -> None:
    c = choose(AMX)
    assert (c.dtype, c.quantization, c.threads) == ("bfloat16", "int8-dense-prefill", 2)
    assert c.chosen == ("dtype", "quantization", "threads")


def test_native_bf16_without_amx_gets_w8a8_prefill_only_where_it_passed_its_bound() -> None:
    c = choose(AVX512_BF16)
    assert (c.dtype, c.quantization) == ("bfloat16", "int8-dense-prefill")
    assert choose(AVX512_BF16, w8a8_passes=True).quantization == "int8-w8a8"
    assert choose(AMX, w8a8_passes=True).quantization == "int8-dense-prefill"


def test_the_recorded_measurements_decide_the_default() -> None:
    # blink/engine/fast_defaults.py's figures (benchmarks/RESULTS.md, "Agreement under one
    # protocol"): W8A8 (down_proj dense) passes its perplexity bound with a margin but keeps 54% of
    # bf16's answers under both protocols and misses a quickstart answer.
    assert INT8_QUALITY.passes and not W8A8_QUALITY.passes
    assert W8A8_QUALITY.increase <= W8A8_QUALITY.bound - 0.01
    assert {a.protocol for a in W8A8_QUALITY.agreement} == {"max-num-seqs 1", "max-num-seqs 16"}
    assert all(a.relative < MIN_RELATIVE_AGREEMENT for a in W8A8_QUALITY.agreement)
    assert "misses" in W8A8_QUALITY.summary() and "quickstart 8/9 right" in W8A8_QUALITY.summary()
    assert choose_serving_config("auto", "auto", 0, "cpu", AVX512_BF16, 1).quantization == "int8-dense-prefill"
    assert choose_serving_config("auto", "auto", 0, "cpu", AMX, 1).quantization == "int8-dense-prefill"


def test_perplexity_alone_does_not_make_a_default() -> None:
    kept = MeasuredQuality("int8-w8a8", 0.0142, 0.03, "x", (Agreement("max-num-seqs 1", 36, 37, 50),), (9, 9))
    flipped = MeasuredQuality("int8-w8a8", 0.0142, 0.03, "x", (Agreement("max-num-seqs 1", 14, 37, 50),), (9, 9))
    assert kept.passes and not flipped.passes
    assert "misses" in flipped.summary() and "14/50 answers as fp32's, 38% of bf16's 37" in flipped.summary()


def test_agreement_is_judged_against_bf16_under_the_same_protocol() -> None:
    """The same share of answers kept passes or not by how bf16 alone did in that run, and every
    protocol recorded must pass: one batch-composition where the mode falls behind is enough."""
    assert Agreement("p", 30, 40, 50).relative == 0.75 and Agreement("p", 30, 30, 50).relative == 1.0
    assert Agreement("p", 3, 0, 50).relative == 0.0  # nothing to be relative to: no pass
    bar = round(MIN_RELATIVE_AGREEMENT * 40)
    ok = Agreement("max-num-seqs 1", bar, 40, 50)
    behind = Agreement("max-num-seqs 16", bar - 1, 40, 50)
    assert MeasuredQuality("m", 0.0, 0.03, "x", (ok,)).passes
    assert not MeasuredQuality("m", 0.0, 0.03, "x", (ok, behind)).passes


def test_a_wrong_quickstart_answer_is_no_default() -> None:
    # The README's first question answered wrongly fails the mode whatever its figures.
    agree = (Agreement("max-num-seqs 1", 37, 37, 50),)
    assert MeasuredQuality("m", 0.0, 0.03, "x", agree, (9, 9)).passes
    wrong = MeasuredQuality("m", 0.0, 0.03, "x", agree, (8, 9))
    assert not wrong.passes and "quickstart 8/9 right" in wrong.summary()


def test_a_measurement_past_its_bound_is_no_default() -> None:
    unsmoothed = MeasuredQuality("int8-w8a8", 0.0403, 0.03, "SmolLM2, before smoothing")
    assert not unsmoothed.passes and "misses" in unsmoothed.summary() and "+4.03%" in unsmoothed.summary()
    assert choose(AVX512_BF16, w8a8_passes=unsmoothed.passes).quantization == "int8-dense-prefill"


def test_without_native_bf16_the_checkpoint_dtype_is_kept_unquantized() -> None:
    for cpu in (AVX512_ONLY, AVX2):
        c = choose(cpu)
        assert (c.dtype, c.quantization) == ("auto", "none")
        assert c.chosen == ("quantization", "threads")


def test_explicit_bf16_still_gets_the_int8_modes_only_on_avx512() -> None:
    assert choose(AVX512_ONLY, dtype="bfloat16").quantization == "int8-dense-prefill"
    assert choose(AVX2, dtype="bfloat16").quantization == "none"


def test_explicit_settings_win() -> None:
    c = choose(AMX, dtype="float32", quantization="int8-w8a8", threads=2)
    assert (c.dtype, c.quantization, c.threads, c.chosen) == ("float32", "int8-w8a8", 2, ())
    assert choose(AMX, quantization="none").quantization == "none"
    assert choose(AMX, dtype="float16").dtype == "float16"


def test_float32_asked_for_is_not_quantized() -> None:
    c = choose(AMX, dtype="float32")
    assert (c.dtype, c.quantization) == ("float32", "none")


def test_a_gpu_keeps_the_checkpoint_dtype_unquantized() -> None:
    c = choose(AMX, device="cuda")
    assert (c.dtype, c.quantization) == ("auto", "none")


def test_the_start_up_line_names_the_configuration_and_the_cpu() -> None:
    line = choose(AMX).line()
    assert line == ("engine configuration: dtype=bfloat16 quantization=int8-dense-prefill threads=2 "
                    "(auto: dtype, quantization, threads); chosen for Intel Xeon (AMX) "
                    "(amx_bf16, amx_int8, avx512_bf16, avx512_vnni, avx512f; 2 cores)")
    explicit = choose(AMX, dtype="float32", quantization="none", threads=2).line()
    assert explicit == "engine configuration: dtype=float32 quantization=none threads=2; all set explicitly"


def test_two_core_machines_give_the_engine_both_cores_larger_ones_keep_the_engine_default() -> None:
    assert choose(AVX512_BF16).threads == 2  # AVX512_BF16 has 2 cores
    assert choose(AVX512_ONLY).threads == 1  # 4 cores: the default_threads passed in
    assert choose(AVX2).threads == 1
    assert choose(AVX512_BF16, threads=1).threads == 1
