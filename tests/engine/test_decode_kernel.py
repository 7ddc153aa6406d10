"""blink::decode_attention_cpu (SDPA's result read in place from the paged cache) and
blink::prefill_attention_cpu (causal bf16 attention of a fresh chunk): results against float64,
input checks, and the runner's wiring (on by default where the CPU has them, off through the
env switch)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from pydantic import ValidationError

from blink.engine.config import EngineConfig
from blink.engine.kernels import attention as decode_kernel
from blink.engine.kernels.attention import (
    decode_attention_cpu,
    decode_attention_scaled_cpu,
    decode_kernel_available,
    paged_decode_cpu,
    prefill_attention_cpu,
    prefill_kernel_available,
)
from blink.engine.kv_cache_dtype import FP8, to_int8
from blink.engine.model_runner import ModelRunner
from blink.engine.scheduler import ScheduledSeq
from blink.engine.sequence import Sequence
from tests.engine.test_model_runner import BlockPool, make_seq

# AVX-512 code; every CI and dev machine here has it, so a build failure there is a test
# failure, never a skip.
needs_avx512 = pytest.mark.skipif(
    torch.backends.cpu.get_cpu_capability() not in ("AVX512", "AMX"),
    reason="blink::decode_attention_cpu is AVX-512 code; this CPU has none",
)

needs_avx512_bf16 = pytest.mark.skipif(
    not decode_kernel._cpu_has_avx512_bf16(),
    reason="blink::prefill_attention_cpu is AVX512-BF16 code; this CPU has none",
)


def _reference(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, tables: torch.Tensor, lens: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """float64 gather + SDPA per sequence over exactly its ``lens[b]`` positions."""
    batch, heads, dim = q.shape
    block_size, kvh = k_cache.shape[1], k_cache.shape[2]
    outs = []
    for b in range(batch):
        n = int(lens[b])
        slots = [int(tables[b, j // block_size]) * block_size + j % block_size for j in range(n)]
        keys = k_cache.reshape(-1, kvh, dim)[slots].double().transpose(0, 1)  # [KVH, n, D]
        values = v_cache.reshape(-1, kvh, dim)[slots].double().transpose(0, 1)
        query = q[b].double().view(kvh, heads // kvh, dim)
        outs.append(F.scaled_dot_product_attention(query, keys, values, scale=scale).reshape(heads, dim))
    return torch.stack(outs)


@needs_avx512
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize(("heads", "kv_heads", "dim", "block_size"), [(9, 3, 64, 16), (4, 4, 16, 4), (14, 2, 64, 16)])
def test_matches_float64_reference(dtype: torch.dtype, heads: int, kv_heads: int, dim: int, block_size: int) -> None:
    assert decode_kernel_available()
    g = torch.Generator().manual_seed(heads * dim + block_size)
    num_blocks, batch, width = 40, 6, 9
    k_cache = (torch.randn(num_blocks, block_size, kv_heads, dim, generator=g) * 2).to(dtype)
    v_cache = torch.randn(num_blocks, block_size, kv_heads, dim, generator=g).to(dtype)
    tables = torch.stack([torch.randperm(num_blocks, generator=g)[:width] for _ in range(batch)])
    # One key, a partial block, a whole block, odd lengths, the whole table (past 16-lane tails).
    lens = torch.tensor([1, block_size - 1, block_size, 2 * block_size + 3, width * block_size - 2, width * block_size])
    q = (torch.randn(batch, heads, dim, generator=g) * 2).to(dtype)
    out = decode_attention_cpu(q, k_cache, v_cache, tables, lens, dim**-0.5)
    assert out.dtype == dtype and out.shape == q.shape
    ref = _reference(q, k_cache, v_cache, tables, lens, dim**-0.5)
    # fp32 accumulation then one rounding to the output dtype (bf16: 2^-8 relative).
    tol = 1e-2 if dtype == torch.bfloat16 else 1e-5
    assert float((out.double() - ref).abs().max()) < tol
    # Non-contiguous q (the rotary output's split view) reads the same.
    wide = torch.cat([q, q], dim=1)[:, :heads]
    assert torch.equal(decode_attention_cpu(wide, k_cache, v_cache, tables, lens, dim**-0.5), out)



@needs_avx512
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_paged_decode_writes_the_slots_then_equals_the_python_op(dtype: torch.dtype) -> None:
    """The compiled graph's C++ step (write k/v, then attend) against layers/paged_decode_op.py's
    gather + SDPA on copies of the same caches: same cache contents, same output."""
    from blink.engine.layers.paged_decode_op import paged_decode_attention

    assert decode_kernel_available()
    torch.manual_seed(3)
    batch, heads, kvh, dim, block_size, blocks = 3, 6, 2, 32, 4, 12
    k_cache = torch.randn(blocks, block_size, kvh, dim).to(dtype)
    v_cache = torch.randn(blocks, block_size, kvh, dim).to(dtype)
    q, k, v = torch.randn(batch, heads, dim).to(dtype), torch.randn(batch, kvh, dim), torch.randn(batch, kvh, dim)
    tables = torch.tensor([[5, 1, 0], [2, 7, 9], [11, 0, 0]])
    lens = torch.tensor([6, 11, 1])
    slots = torch.tensor([int(tables[b, (n - 1) // block_size]) * block_size + (n - 1) % block_size for b, n in enumerate(lens)])
    mask = torch.full((batch, 1, 1, tables.shape[1] * block_size), float("-inf"), dtype=dtype)
    for b, n in enumerate(lens):
        mask[b, ..., : int(n)] = 0
    k2, v2 = k_cache.clone(), v_cache.clone()
    ours = paged_decode_cpu(q, k, v, k_cache, v_cache, slots, tables, lens, 0.125)
    theirs = paged_decode_attention(q, k, v, k2, v2, slots, tables, mask, 0.125)
    assert torch.equal(k_cache, k2) and torch.equal(v_cache, v2)
    assert ours.shape == (batch, heads * dim)
    tol = 2e-2 if dtype == torch.bfloat16 else 1e-5
    torch.testing.assert_close(ours.float(), theirs.float(), atol=tol, rtol=tol)

@needs_avx512
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_fp8_cache_matches_float64_reference(dtype: torch.dtype) -> None:
    """kv_cache_dtype="fp8": q in the model dtype, caches in e4m3 widened inside the kernel."""
    assert decode_kernel_available()
    g = torch.Generator().manual_seed(11)
    heads, kv_heads, dim, block_size, num_blocks, batch, width = 9, 3, 64, 16, 40, 5, 9
    k_cache = (torch.randn(num_blocks, block_size, kv_heads, dim, generator=g) * 3).to(FP8)
    v_cache = torch.randn(num_blocks, block_size, kv_heads, dim, generator=g).to(FP8)
    tables = torch.stack([torch.randperm(num_blocks, generator=g)[:width] for _ in range(batch)])
    lens = torch.tensor([1, block_size - 1, 2 * block_size + 3, width * block_size - 2, width * block_size])
    q = (torch.randn(batch, heads, dim, generator=g) * 2).to(dtype)
    out = decode_attention_cpu(q, k_cache, v_cache, tables, lens, dim**-0.5)
    assert out.dtype == dtype and out.shape == q.shape
    ref = _reference(q, k_cache.float(), v_cache.float(), tables, lens, dim**-0.5)
    tol = 1e-2 if dtype == torch.bfloat16 else 1e-5
    assert float((out.double() - ref).abs().max()) < tol


@needs_avx512
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_int8_cache_matches_float64_reference(dtype: torch.dtype) -> None:
    """kv_cache_dtype="int8": int8 rows times their per-(slot, KV head) scales."""
    assert decode_kernel_available()
    g = torch.Generator().manual_seed(12)
    heads, kv_heads, dim, block_size, num_blocks, batch, width = 9, 3, 64, 16, 40, 5, 9
    # Rows of very different magnitudes, so a scale applied to the wrong row shows.
    magnitude = torch.rand(num_blocks, block_size, kv_heads, 1, generator=g) * 10
    k_cache, k_scale = to_int8(torch.randn(num_blocks, block_size, kv_heads, dim, generator=g) * magnitude)
    v_cache, v_scale = to_int8(torch.randn(num_blocks, block_size, kv_heads, dim, generator=g) * magnitude)
    tables = torch.stack([torch.randperm(num_blocks, generator=g)[:width] for _ in range(batch)])
    lens = torch.tensor([1, block_size - 1, 2 * block_size + 3, width * block_size - 2, width * block_size])
    q = (torch.randn(batch, heads, dim, generator=g) * 0.3).to(dtype)
    out = decode_attention_scaled_cpu(q, k_cache, v_cache, k_scale, v_scale, tables, lens, dim**-0.5)
    assert out.dtype == dtype and out.shape == q.shape
    keys, values = k_cache.double() * k_scale[..., None], v_cache.double() * v_scale[..., None]
    ref = _reference(q, keys, values, tables, lens, dim**-0.5)
    tol = 1e-2 * float(ref.abs().max()) if dtype == torch.bfloat16 else 1e-4
    assert float((out.double() - ref).abs().max()) < tol
    with pytest.raises(RuntimeError, match="needs its scales"):
        decode_attention_cpu(q, k_cache, v_cache, tables, lens, 1.0)
    with pytest.raises(RuntimeError, match="scales are contiguous fp32"):
        decode_attention_scaled_cpu(q, k_cache, v_cache, k_scale.double(), v_scale, tables, lens, 1.0)


@needs_avx512
def test_fp8_widening_is_exact_for_every_finite_byte() -> None:
    """One cached position: the softmax weight is exactly 1, so the output is the V row itself,
    i.e. the kernel's byte -> fp32 widening, compared with torch's for all 254 finite e4m3 bytes
    (subnormals, both zeros, ±448)."""
    assert decode_kernel_available()
    finite = torch.tensor([b for b in range(256) if b not in (0x7F, 0xFF)] + [0, 0], dtype=torch.uint8)
    rows = finite.view(16, 1, 1, 16).view(FP8)  # 16 blocks of one slot, 1 KV head, head_dim 16
    q = torch.zeros(16, 1, 16)
    out = decode_attention_cpu(q, rows, rows, torch.arange(16)[:, None], torch.ones(16, dtype=torch.long), 1.0)
    assert torch.equal(out.reshape(-1), rows.float().reshape(-1))


@needs_avx512
def test_fp8_paged_decode_writes_the_bytes_the_python_op_writes() -> None:
    """The compiled path's C++ write + attend on an fp8 cache against paged_decode_op.py's."""
    from blink.engine.layers.paged_decode_op import paged_decode_attention

    assert decode_kernel_available()
    torch.manual_seed(4)
    batch, heads, kvh, dim, block_size, blocks = 3, 6, 2, 32, 4, 12
    k_cache = torch.randn(blocks, block_size, kvh, dim).to(FP8)
    v_cache = torch.randn(blocks, block_size, kvh, dim).to(FP8)
    # Keys far past e4m3's range: both paths saturate them to ±448 (no NaN).
    q, k, v = torch.randn(batch, heads, dim) * 0.01, torch.randn(batch, kvh, dim) * 1e3, torch.randn(batch, kvh, dim)
    tables = torch.tensor([[5, 1, 0], [2, 7, 9], [11, 0, 0]])
    lens = torch.tensor([6, 11, 1])
    slots = torch.tensor([int(tables[b, (n - 1) // block_size]) * block_size + (n - 1) % block_size for b, n in enumerate(lens)])
    mask = torch.full((batch, 1, 1, tables.shape[1] * block_size), float("-inf"))
    for b, n in enumerate(lens):
        mask[b, ..., : int(n)] = 0
    k2, v2 = k_cache.clone(), v_cache.clone()
    ours = paged_decode_cpu(q, k, v, k_cache, v_cache, slots, tables, lens, 0.125)
    theirs = paged_decode_attention(q, k, v, k2, v2, slots, tables, mask, 0.125)
    assert torch.equal(k_cache.view(torch.uint8), k2.view(torch.uint8))
    assert torch.equal(v_cache.view(torch.uint8), v2.view(torch.uint8))
    assert float(k_cache.float().abs().max()) == 448.0 and not bool(ours.isnan().any())
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)


@needs_avx512
def test_rejects_bad_inputs() -> None:
    assert decode_kernel_available()
    cache = torch.zeros(4, 4, 1, 16)
    q = torch.zeros(1, 2, 16)
    tables = torch.tensor([[0, 1]])
    with pytest.raises(RuntimeError, match="outside the cache"):
        decode_attention_cpu(q, cache, cache, torch.tensor([[0, 7]]), torch.tensor([5]), 1.0)
    with pytest.raises(RuntimeError, match="outside the block table"):
        decode_attention_cpu(q, cache, cache, tables, torch.tensor([9]), 1.0)
    with pytest.raises(RuntimeError, match="outside the block table"):
        decode_attention_cpu(q, cache, cache, tables, torch.tensor([0]), 1.0)
    with pytest.raises(RuntimeError, match="multiple of 16"):
        decode_attention_cpu(torch.zeros(1, 2, 8), torch.zeros(4, 4, 1, 8), torch.zeros(4, 4, 1, 8), tables,
                             torch.tensor([3]), 1.0)
    with pytest.raises(RuntimeError, match="share a dtype"):
        decode_attention_cpu(q.bfloat16(), cache, cache, tables, torch.tensor([3]), 1.0)


@needs_avx512_bf16
@pytest.mark.parametrize(
    ("n", "heads", "kv_heads", "dim"),
    # one row; under one 8-row tile; odd tails of tiles and 16-key blocks; GQA 7:1; head_dim 32/128
    [(1, 9, 3, 64), (5, 9, 3, 64), (37, 4, 2, 32), (100, 14, 2, 64), (77, 8, 8, 128), (300, 9, 3, 64)],
)
def test_prefill_matches_float64_reference(n: int, heads: int, kv_heads: int, dim: int) -> None:
    assert prefill_kernel_available()
    g = torch.Generator().manual_seed(n + heads)
    q = (torch.randn(n, heads, dim, generator=g) * 2).bfloat16()
    k = (torch.randn(n, kv_heads, dim, generator=g) * 2).bfloat16()
    v = torch.randn(n, kv_heads, dim, generator=g).bfloat16()
    out = prefill_attention_cpu(q, k, v, dim**-0.5)
    assert out.dtype == torch.bfloat16 and out.shape == q.shape

    def sdpa(dtype: torch.dtype) -> torch.Tensor:
        args = [x.to(dtype).transpose(0, 1).unsqueeze(0) for x in (q, k, v)]
        o = F.scaled_dot_product_attention(*args, is_causal=True, scale=dim**-0.5, enable_gqa=heads != kv_heads)
        return o.squeeze(0).transpose(0, 1)

    ref = sdpa(torch.float64)
    # fp32 scores and softmax; probabilities and the output rounded to bf16 as aten's flash
    # kernel does: no further from float64 than aten's own bf16 SDPA (+ a quarter bf16 step).
    err = float((out.double() - ref).abs().max())
    assert err <= float((sdpa(torch.bfloat16).double() - ref).abs().max()) * 1.25 + 1e-3
    # Strided views (the rotary output's split) read the same as contiguous copies.
    qkv = torch.cat([q, k, v], dim=1)
    views = qkv.split([heads, kv_heads, kv_heads], dim=1)
    assert torch.equal(prefill_attention_cpu(*views, dim**-0.5), out)


@needs_avx512_bf16
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_scores_far_below_the_max_flush_to_zero_and_match_float64(dtype: torch.dtype) -> None:
    """Rows whose scores sit mostly more than 87 below their max (exp under FLT_MIN: the kernels
    return 0, not a subnormal, so Intel cores take no assists) still give float64's answer, in
    decode and in prefill, and a row with one dominant key returns that key's value."""
    g = torch.Generator().manual_seed(7)
    heads, kv_heads, dim, block_size, batch, width = 9, 3, 64, 16, 4, 8
    k_cache = (torch.randn(width * batch, block_size, kv_heads, dim, generator=g) * 12).to(dtype)
    v_cache = torch.randn(width * batch, block_size, kv_heads, dim, generator=g).to(dtype)
    q = (torch.randn(batch, heads, dim, generator=g) * 12).to(dtype)
    tables = torch.arange(width * batch).view(batch, width)
    lens = torch.tensor([1, 17, 100, width * block_size])
    scores = torch.einsum("bhd,bnhd->bhn", q.double().view(batch, kv_heads, 3, dim).flatten(1, 2),
                          k_cache.double().view(batch, -1, kv_heads, dim).repeat_interleave(3, dim=2)) * dim**-0.5
    assert float((scores - scores.amax(-1, keepdim=True) < -87).double().mean()) > 0.5  # mostly flushed
    out = decode_attention_cpu(q, k_cache, v_cache, tables, lens, dim**-0.5)
    tol = 1e-2 if dtype == torch.bfloat16 else 1e-5
    assert float((out.double() - _reference(q, k_cache, v_cache, tables, lens, dim**-0.5)).abs().max()) < tol
    if dtype == torch.bfloat16:
        n = 200
        qp = (torch.randn(n, heads, dim, generator=g) * 12).bfloat16()
        kp = (torch.randn(n, kv_heads, dim, generator=g) * 12).bfloat16()
        vp = torch.randn(n, kv_heads, dim, generator=g).bfloat16()
        args = [x.double().transpose(0, 1).unsqueeze(0) for x in (qp, kp, vp)]
        ref = F.scaled_dot_product_attention(*args, is_causal=True, scale=dim**-0.5, enable_gqa=True)
        err = float((prefill_attention_cpu(qp, kp, vp, dim**-0.5).double() - ref.squeeze(0).transpose(0, 1)).abs().max())
        assert err < 2e-2


@needs_avx512_bf16
def test_prefill_rejects_bad_inputs() -> None:
    assert prefill_kernel_available()
    x = torch.zeros(4, 2, 64, dtype=torch.bfloat16)
    with pytest.raises(RuntimeError, match="bf16 only"):
        prefill_attention_cpu(x.float(), x.float(), x.float(), 1.0)
    with pytest.raises(RuntimeError, match="multiple of 32"):
        prefill_attention_cpu(x[..., :48], x[..., :48], x[..., :48], 1.0)
    with pytest.raises(RuntimeError, match="multiple of KV heads"):
        prefill_attention_cpu(torch.zeros(4, 3, 64, dtype=torch.bfloat16), x, x, 1.0)
    with pytest.raises(RuntimeError, match="disagree"):
        prefill_attention_cpu(x[:3], x, x, 1.0)


def _decode_steps(
    runner: ModelRunner, prompt: list[int], steps: int, forced: list[int] | None = None
) -> tuple[list[int], torch.Tensor]:
    """Prefill two sequences (different lengths), then ``steps`` batch-of-two decodes; greedy
    unless ``forced`` gives the tokens to feed. Returns the tokens fed and every step's logits."""
    pool = BlockPool(runner.num_blocks, runner.block_size)
    seqs = [make_seq("a", prompt), make_seq("b", prompt[: len(prompt) // 2])]
    tokens: list[int] = []
    rows: list[torch.Tensor] = []

    def feed(seq: Sequence, row: torch.Tensor) -> None:
        token = forced[len(tokens)] if forced is not None else int(row.argmax())
        seq.num_computed_tokens = seq.num_tokens
        seq.append_token(token)
        tokens.append(token)
        rows.append(row)

    for seq in seqs:
        pool.cover(seq, seq.num_tokens + steps)
        feed(seq, runner.execute([ScheduledSeq(seq, seq.num_tokens)])[0])
    for _ in range(steps):
        for seq, row in zip(seqs, runner.execute([ScheduledSeq(seq, 1) for seq in seqs]), strict=True):
            feed(seq, row)
    return tokens, torch.stack(rows)


@pytest.fixture(scope="module")
def llama_dim32(tmp_path_factory: pytest.TempPathFactory, tiny_tokenizer_dir: Path) -> Path:
    """tiny_llama with head_dim 32 (4 query / 2 KV heads), the smallest the prefill kernel serves."""
    from blink.demo.tiny import build_tiny_checkpoint

    return build_tiny_checkpoint(
        tmp_path_factory.mktemp("llama-dim32"), "llama", head_dim=32, tokenizer_dir=tiny_tokenizer_dir, seed=3
    )


@needs_avx512
def test_runner_serves_with_kernels_and_matches_sdpa(llama_dim32: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    torch.set_num_threads(1)
    config = EngineConfig(model=str(llama_dim32), dtype="bfloat16", kv_cache_memory_bytes=1 << 20,
                          prefill_attention="kernel")
    with_kernel = ModelRunner(config)
    assert with_kernel.decode_kernel
    assert with_kernel.prefill_kernel == decode_kernel._cpu_has_avx512_bf16()
    assert all(attn.decode_kernel for attn in with_kernel.model.attention_layers())
    monkeypatch.setenv("BLINK_DECODE_ATTENTION", "sdpa")
    without = ModelRunner(config)
    assert not without.decode_kernel and not without.prefill_kernel
    assert not any(a.decode_kernel or a.prefill_kernel for a in without.model.attention_layers())
    prompt = list(range(3, 40))
    # Teacher-forced on the SDPA run's greedy tokens: bf16 rounding may tip a near-tie somewhere in
    # a long greedy run, so the per-step logits are what is compared (prefill rows and decodes).
    tokens, sdpa_logits = _decode_steps(without, prompt, 8)
    _, ours_logits = _decode_steps(with_kernel, prompt, 8, forced=tokens)
    scale = float(sdpa_logits.abs().max())
    assert float((ours_logits - sdpa_logits).abs().max()) < 0.03 * scale
    agree = (ours_logits.argmax(-1) == sdpa_logits.argmax(-1)).float().mean()
    assert agree >= 0.9


@needs_avx512
def test_prefill_on_sdpa_keeps_the_decode_kernel(llama_dim32: Path) -> None:
    """The AMX choice: torch's SDPA for fresh prefill chunks, Blink's kernel for decode."""
    config = EngineConfig(model=str(llama_dim32), dtype="bfloat16", kv_cache_memory_bytes=1 << 20,
                          prefill_attention="sdpa")
    runner = ModelRunner(config)
    assert runner.decode_kernel and not runner.prefill_kernel
    assert all(a.decode_kernel and not a.prefill_kernel for a in runner.model.attention_layers())


def test_unknown_prefill_attention_is_refused(llama_dim32: Path) -> None:
    with pytest.raises(ValidationError, match="prefill_attention"):
        EngineConfig(model=str(llama_dim32), kv_cache_memory_bytes=1 << 20, prefill_attention="amx")  # type: ignore[arg-type]


def test_fp32_runner_keeps_sdpa_for_prefill(llama_dim32: Path) -> None:
    runner = ModelRunner(EngineConfig(model=str(llama_dim32), dtype="float32", kv_cache_memory_bytes=1 << 20))
    assert not runner.prefill_kernel  # the fp32 path stays on aten's SDPA, held exact vs transformers


def test_unavailable_without_avx512(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX2")
    assert not decode_kernel.decode_kernel_available()
