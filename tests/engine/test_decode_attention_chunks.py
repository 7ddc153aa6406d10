"""blink::decode_attention_cpu at real context lengths (decode_attention.h): contexts cut into
kChunk-position chunks merged in order (split-K), 16-position score tiles with tails, GQA groups
1/3/7, bf16 / fp32 / fp8 / int8 caches, against float64 gathered SDPA; the same bits whatever the
thread count and whichever batch a sequence is in; hostile shapes refused with a clear error."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from blink.engine.kernels.attention import (
    decode_attention_cpu,
    decode_attention_scaled_cpu,
    decode_kernel_available,
)
from blink.engine.kernels.build import cpu_has_avx512
from blink.engine.kv_cache_dtype import FP8, to_int8
from tests.engine.test_decode_kernel import _reference, needs_avx512

# decode_attention.h's kChunk: lengths around it and its multiples exercise the merge.
CHUNK = 256
# One key; a tile tail; one past a tile; a chunk less/exactly/plus one; several chunks with a tail.
LENGTHS = [1, 15, 17, CHUNK - 1, CHUNK, CHUNK + 1, 1000, 3 * CHUNK + 17]


def _pool(
    lens: list[int], heads: int, kv_heads: int, dim: int, block_size: int, seed: int, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """q, K/V caches (blocks shuffled among the sequences, as a running pool), tables, lengths."""
    g = torch.Generator().manual_seed(seed)
    width = max((n + block_size - 1) // block_size for n in lens)
    blocks = width * len(lens) + 3
    k_cache = (torch.randn(blocks, block_size, kv_heads, dim, generator=g) * 2).to(dtype)
    v_cache = torch.randn(blocks, block_size, kv_heads, dim, generator=g).to(dtype)
    tables = torch.randperm(blocks, generator=g)[: width * len(lens)].view(len(lens), width)
    q = (torch.randn(len(lens), heads, dim, generator=g) * 2).to(dtype)
    return q, k_cache, v_cache, tables, torch.tensor(lens)


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    """One intra-op thread unless a test says otherwise (restored after); the kernel built."""
    if cpu_has_avx512():
        assert decode_kernel_available()
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@needs_avx512
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize(("heads", "kv_heads", "block_size"), [(4, 4, 16), (9, 3, 16), (14, 2, 32), (7, 1, 5)])
def test_long_and_odd_lengths_match_float64(dtype: torch.dtype, heads: int, kv_heads: int, block_size: int) -> None:
    dim = 64
    q, k_cache, v_cache, tables, lens = _pool(LENGTHS, heads, kv_heads, dim, block_size, heads + block_size, dtype)
    out = decode_attention_cpu(q, k_cache, v_cache, tables, lens, dim**-0.5)
    assert out.dtype == dtype and out.shape == q.shape
    ref = _reference(q, k_cache, v_cache, tables, lens, dim**-0.5)
    # fp32 scores, softmax and sums; one rounding to the output dtype (bf16: 2^-8 relative).
    tol = 1e-2 if dtype == torch.bfloat16 else 1e-5
    assert float((out.double() - ref).abs().max()) < tol


@needs_avx512
@pytest.mark.parametrize("dim", [16, 32, 48, 128])
def test_head_dims_off_the_64_path(dim: int) -> None:
    """head_dim 16 and 48 (a half bf16 vector in the dot products; value vectors not in 4s), 32, 128."""
    q, k_cache, v_cache, tables, lens = _pool([1, 17, CHUNK + 3], 6, 2, dim, 16, dim, torch.bfloat16)
    out = decode_attention_cpu(q, k_cache, v_cache, tables, lens, dim**-0.5)
    ref = _reference(q, k_cache, v_cache, tables, lens, dim**-0.5)
    assert float((out.double() - ref).abs().max()) < 1e-2


@needs_avx512
def test_same_bits_whatever_the_threads_and_the_batch() -> None:
    """A long sequence alone runs its chunks on several threads and is merged after; in a wide batch
    the chunks stay on one thread: the results must agree bit for bit (the engine's exactness
    contract: batch of 1 vs many, the fused step vs eager)."""
    lens = [3 * CHUNK + 17, 40, 1000, 1]
    q, k_cache, v_cache, tables, lens_t = _pool(lens, 9, 3, 64, 16, 5, torch.bfloat16)
    together = decode_attention_cpu(q, k_cache, v_cache, tables, lens_t, 0.125)
    torch.set_num_threads(2)
    assert torch.equal(decode_attention_cpu(q, k_cache, v_cache, tables, lens_t, 0.125), together)
    for b in range(len(lens)):
        alone = decode_attention_cpu(q[b : b + 1], k_cache, v_cache, tables[b : b + 1], lens_t[b : b + 1], 0.125)
        assert torch.equal(alone[0], together[b])


@needs_avx512
def test_fp8_cache_at_long_lengths() -> None:
    q, k_cache, v_cache, tables, lens = _pool(LENGTHS, 14, 2, 64, 16, 21, torch.float32)
    k8, v8 = k_cache.to(FP8), v_cache.to(FP8)
    out = decode_attention_cpu(q.bfloat16(), k8, v8, tables, lens, 0.125)
    ref = _reference(q.bfloat16(), k8.float(), v8.float(), tables, lens, 0.125)
    assert float((out.double() - ref).abs().max()) < 1e-2


@needs_avx512
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_int8_cache_at_long_lengths(dtype: torch.dtype) -> None:
    q, k_cache, v_cache, tables, lens = _pool(LENGTHS, 9, 3, 64, 16, 22, torch.float32)
    # Rows of very different magnitudes, so a scale applied to the wrong row shows.
    magnitude = torch.rand(*k_cache.shape[:3], 1, generator=torch.Generator().manual_seed(1)) * 10
    k8, ks = to_int8(k_cache * magnitude)
    v8, vs = to_int8(v_cache * magnitude)
    q = (q * 0.1).to(dtype)
    out = decode_attention_scaled_cpu(q, k8, v8, ks, vs, tables, lens, 0.125)
    assert out.dtype == dtype
    keys, values = k8.double() * ks[..., None], v8.double() * vs[..., None]
    ref = _reference(q, keys, values, tables, lens, 0.125)
    # fp32 throughout; bf16 output: one rounding (2^-8 relative).
    tol = 1e-2 if dtype == torch.bfloat16 else 1e-4
    assert float((out.double() - ref).abs().max()) < tol * max(1.0, float(ref.abs().max()))


@needs_avx512
def test_softmax_spread_across_chunks() -> None:
    """One key in the last chunk dominates (scores far apart between chunks): the merge must
    rescale every chunk to the overall max, not overflow or drop the small ones to NaN."""
    n = 3 * CHUNK + 5
    q, k_cache, v_cache, tables, lens = _pool([n], 3, 1, 64, 16, 9, torch.float32)
    slot = int(tables[0, (n - 2) // 16]) * 16 + (n - 2) % 16
    k_cache.view(-1, 1, 64)[slot] = q[0, 0] * 40  # q0 . k ~ 40 * |q0|^2: exp(-that) elsewhere underflows
    out = decode_attention_cpu(q, k_cache, v_cache, tables, lens, 1.0)
    ref = _reference(q, k_cache, v_cache, tables, lens, 1.0)
    assert not bool(out.isnan().any())
    assert float((out.double() - ref).abs().max()) < 1e-5


@needs_avx512
def test_hostile_shapes_are_refused() -> None:
    tables, lens = torch.tensor([[0]]), torch.tensor([1])
    with pytest.raises(RuntimeError, match="at most 512"):
        wide = torch.zeros(1, 1, 528)
        decode_attention_cpu(wide, torch.zeros(2, 4, 1, 528), torch.zeros(2, 4, 1, 528), tables, lens, 1.0)
    with pytest.raises(RuntimeError, match="head shapes disagree"):
        decode_attention_cpu(torch.zeros(1, 2, 16), torch.zeros(2, 4, 0, 16), torch.zeros(2, 4, 0, 16), tables, lens, 1.0)
    with pytest.raises(RuntimeError, match="outside the cache"):
        decode_attention_cpu(torch.zeros(1, 2, 16), torch.zeros(2, 4, 1, 16), torch.zeros(2, 4, 1, 16),
                             torch.tensor([[-1]]), lens, 1.0)
    with pytest.raises(RuntimeError, match="one block-table row"):
        decode_attention_cpu(torch.zeros(2, 2, 16), torch.zeros(2, 4, 1, 16), torch.zeros(2, 4, 1, 16), tables, lens, 1.0)
    # An empty batch is no work, not an error.
    empty = decode_attention_cpu(torch.zeros(0, 2, 16), torch.zeros(2, 4, 1, 16), torch.zeros(2, 4, 1, 16),
                                 torch.zeros(0, 1, dtype=torch.long), torch.zeros(0, dtype=torch.long), 1.0)
    assert empty.shape == (0, 2, 16)
