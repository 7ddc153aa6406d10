"""The fast defaults: a pure function from the CPU's features and the user's settings to the engine's."""

from __future__ import annotations

from blink.engine.cpu_features import CpuFeatures
from blink.engine.fast_defaults import (
    INT8_QUALITY,
    SIGNIFICANCE,
    SIGNIFICANT_LOSS,
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
    # protocol"): W8A8 (down_proj dense) passes its perplexity bound with a margin and loses 4 and 3
    # answers against the int8 weights under the two protocols: under the bar, so it is the
    # default where it is the faster prefill (AVX512-BF16 without AMX).
    assert INT8_QUALITY.passes and W8A8_QUALITY.passes
    assert W8A8_QUALITY.increase <= W8A8_QUALITY.bound - 0.01
    assert {a.protocol for a in W8A8_QUALITY.agreement} == {"max-num-seqs 1", "max-num-seqs 16"}
    assert [W8A8_QUALITY.answers_lost(a) for a in W8A8_QUALITY.agreement] == [4, 3]
    assert "passes" in W8A8_QUALITY.summary() and "quickstart 8/9 right" in W8A8_QUALITY.summary()
    assert choose_serving_config("auto", "auto", 0, "cpu", AVX512_BF16, 1).quantization == "int8-w8a8"
    assert choose_serving_config("auto", "auto", 0, "cpu", AMX, 1).quantization == "int8-dense-prefill"


def test_the_bar_is_where_a_loss_could_be_significant() -> None:
    # k answers lost and none gained: one-sided sign-test p = 0.5**k.
    assert 0.5 ** SIGNIFICANT_LOSS < SIGNIFICANCE <= 0.5 ** (SIGNIFICANT_LOSS - 1)
    assert SIGNIFICANT_LOSS == 5


def test_perplexity_alone_does_not_make_a_default() -> None:
    kept = MeasuredQuality("int8-w8a8", 0.0142, 0.03, "x", (Agreement("max-num-seqs 1", 22, 37, 50, int8=23),), (9, 9))
    flipped = MeasuredQuality("int8-w8a8", 0.0142, 0.03, "x", (Agreement("max-num-seqs 1", 14, 37, 50, int8=23),), (9, 9))
    assert kept.passes and not flipped.passes
    assert "misses" in flipped.summary() and "14/50 answers as fp32's" in flipped.summary()
    assert "answers lost against int8 weights 9" in flipped.summary()


def test_losses_are_counted_against_int8_in_the_same_run_under_every_protocol() -> None:
    """Every protocol recorded must pass: one batch composition where the mode falls behind is
    enough, and answers gained under one protocol do not make up for those lost under another."""
    under = Agreement("max-num-seqs 1", 30 - (SIGNIFICANT_LOSS - 1), 40, 50, int8=30)
    at_bar = Agreement("max-num-seqs 16", 30 - SIGNIFICANT_LOSS, 40, 50, int8=30)
    ahead = Agreement("max-num-seqs 16", 35, 40, 50, int8=30)
    assert MeasuredQuality("m", 0.0, 0.03, "x", (under,)).passes
    assert MeasuredQuality("m", 0.0, 0.03, "x", (under, ahead)).passes
    assert not MeasuredQuality("m", 0.0, 0.03, "x", (under, at_bar)).passes
    assert not MeasuredQuality("m", 0.0, 0.03, "x", (at_bar, ahead)).passes
    # Without the reference counted in the same run there is nothing to compare with: no pass.
    assert not MeasuredQuality("m", 0.0, 0.03, "x", (Agreement("p", 40, 40, 50),)).passes


def test_wrong_quickstart_answers_count_as_lost_answers() -> None:
    same = (Agreement("max-num-seqs 1", 23, 37, 50, int8=23),)
    assert MeasuredQuality("m", 0.0, 0.03, "x", same, (8, 9)).passes
    behind = (Agreement("max-num-seqs 1", 23 - (SIGNIFICANT_LOSS - 1), 37, 50, int8=23),)
    assert MeasuredQuality("m", 0.0, 0.03, "x", behind, (9, 9)).passes
    wrong = MeasuredQuality("m", 0.0, 0.03, "x", behind, (8, 9))
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
