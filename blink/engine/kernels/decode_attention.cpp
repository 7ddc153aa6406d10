// Decode attention straight from the paged KV cache: one query token per sequence, on the CPU.
//
// Why our own: the eager decode path gathered every sequence's blocks (index_select) and ran
// aten's flash SDPA on [B, KVH, group, D] queries. At 16 streams (SmolLM2 shape, ~100 keys per
// sequence) that was 417 us SDPA + 110 us gather per layer on 1 thread, ~21% of a step, for
// ~2 MFLOP of work: the flash kernel's per-(sequence, head) blocking and fp32 scratch dominate
// when each sequence has 3 query rows. Here each (sequence, chunk of positions, KV head) task
// reads its keys and values in place through the block table, computes the group's scores in
// fp32, a softmax and the weighted sum of values, with no gather, no mask and no padding.
//
// Semantics are SDPA's with an fp32 softmax: out[b, h] = softmax(scale * q[b, h] . K[b, kv(h)]^T)
// V[b, kv(h)] over the first lens[b] cached positions, kv(h) = h / (H / KVH) (grouped-query
// attention as in transformers). Accumulation is fp32; the output is cast to q's dtype. The per-head
// math lives in decode_attention.h, shared with the fused decode step (decode_step.cpp).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>
#include <torch/library.h>

#include <immintrin.h>

#include "decode_attention.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>
#include <tuple>
#include <type_traits>
#include <vector>

namespace {

namespace attn = blink::attn;
using attn::kLanes;

// About 10 us of work on one thread (~10 ns per position and KV head, SmolLM2 shape, bf16 cache:
// benchmarks/decode_attention.py), about what one fork and join of the thread pool costs.
constexpr int64_t kMinSplitWork = 1024;

// T: q and the output; C: the cache (T, fp8 e4m3 or int8, widened on load). With int8, ks/vs are
// the [slots, KV heads] fp32 row scales: q . (s k) = s (q . k), and p (s v) = (p s) v, so a scale
// multiplies one score and one weight instead of every element.
//
// Tasks are (sequence, kChunk-position chunk, KV head), in that order, spread evenly over the
// threads: a long context of a few sequences splits into chunks on every thread (flash-decoding),
// and a short one still splits by KV head. A sequence of one chunk writes its output from the
// task; longer ones leave per-chunk partials, merged in chunk order by whichever task ends last.
template <typename T, typename C>
void decode_attention_impl(const at::Tensor& q, const at::Tensor& k_cache, const at::Tensor& v_cache,
                           const at::Tensor& block_tables, const at::Tensor& lens, double scale,
                           at::Tensor& out, const float* ks = nullptr, const float* vs = nullptr) {
  const int64_t batch = q.size(0), heads = q.size(1), dim = q.size(2);
  const int64_t block_size = k_cache.size(1), kv_heads = k_cache.size(2), group = heads / kv_heads;
  const int64_t width = block_tables.size(1);
  const int64_t slot_stride = kv_heads * dim;  // elements between consecutive cache positions
  const T* qp = q.data_ptr<T>();
  const C* kp = k_cache.data_ptr<C>();
  const C* vp = v_cache.data_ptr<C>();
  const int64_t* tables = block_tables.data_ptr<int64_t>();
  const int64_t* lp = lens.data_ptr<int64_t>();
  T* op = out.data_ptr<T>();
  const float fscale = static_cast<float>(scale);
  const int64_t part_size = attn::partial_floats(group, dim);

  // first[b]: sequence b's first chunk in the flat chunk list (and its partials' index).
  std::vector<int64_t> first(batch + 1, 0), owner;
  for (int64_t b = 0; b < batch; ++b) first[b + 1] = first[b] + attn::chunks_of(lp[b]);
  const int64_t chunks = first[batch];
  owner.reserve(chunks);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t c = first[b]; c < first[b + 1]; ++c) owner.push_back(b);
  const bool split = chunks > batch;
  std::vector<float> parts(split ? chunks * kv_heads * part_size : 0);
  // Chunk tasks of (sequence b, KV head h) still running; the task that finishes the last merges
  // them (in chunk order, so who merges does not change the bits), in the same parallel region:
  // a second region's fork and join cost more than the merge on a busy machine.
  std::vector<std::atomic<int64_t>> remaining(split ? batch * kv_heads : 0);
  if (split)
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t h = 0; h < kv_heads; ++h) remaining[b * kv_heads + h].store(first[b + 1] - first[b]);

  // Below kMinSplitWork (cached positions x KV heads in the call) one thread does it all: the
  // threads' fork and join would cost about what they save.
  int64_t work = 0;
  for (int64_t b = 0; b < batch; ++b) work += lp[b] * kv_heads;
  const int64_t grain = work < kMinSplitWork ? chunks * kv_heads : 1;
  at::parallel_for(0, chunks * kv_heads, grain, [&](int64_t begin, int64_t end) {
    std::vector<float> scratch(attn::chunk_scratch_floats(group, dim)), own(part_size);
    for (int64_t task = begin; task < end; ++task) {
      const int64_t chunk = task / kv_heads, h = task % kv_heads, b = owner[chunk];
      const int64_t c = chunk - first[b], n = lp[b], n_chunks = first[b + 1] - first[b];
      const attn::PagedSeq seq{tables + b * width, block_size, slot_stride, n};
      const int64_t q_off = (b * heads + h * group) * dim;
      // Partials of chunk c of head h at (first[b] + c) * kv_heads + h: kv_heads * part_size apart.
      float* part = n_chunks == 1 ? own.data() : parts.data() + (chunk * kv_heads + h) * part_size;
      attn::attend_chunk<T, C>(qp + q_off, fscale, group, dim, kp, vp, seq, h, c * attn::kChunk,
                               std::min(n, (c + 1) * attn::kChunk), scratch.data(), part, ks, vs);
      if (n_chunks == 1) {
        attn::merge_chunks<T>(part, 1, part_size, group, dim, op + q_off);
      } else if (remaining[b * kv_heads + h].fetch_sub(1, std::memory_order_acq_rel) == 1) {
        attn::merge_chunks<T>(parts.data() + (first[b] * kv_heads + h) * part_size, n_chunks, kv_heads * part_size,
                              group, dim, op + q_off);
      }
    }
  });
}

// Shape, dtype and index checks shared by both ops; returns q, the tables and lengths contiguous.
std::tuple<at::Tensor, at::Tensor, at::Tensor> checked(const at::Tensor& q, const at::Tensor& k_cache,
                                                       const at::Tensor& v_cache, const at::Tensor& block_tables,
                                                       const at::Tensor& lens) {
  TORCH_CHECK(q.dim() == 3 && k_cache.dim() == 4 && v_cache.sizes() == k_cache.sizes(),
              "q [B, H, D], caches [blocks, block_size, KVH, D]");
  const bool narrow = k_cache.scalar_type() == at::kFloat8_e4m3fn || k_cache.scalar_type() == at::kChar;
  TORCH_CHECK((q.scalar_type() == k_cache.scalar_type() || narrow) && v_cache.scalar_type() == k_cache.scalar_type(),
              "q and the caches must share a dtype (or the caches be float8_e4m3fn / int8)");
  TORCH_CHECK(q.scalar_type() == at::kBFloat16 || q.scalar_type() == at::kFloat, "bf16 or fp32 only");
  TORCH_CHECK(k_cache.size(2) >= 1 && q.size(2) == k_cache.size(3) && q.size(1) % k_cache.size(2) == 0,
              "head shapes disagree");
  TORCH_CHECK(q.size(2) % kLanes == 0 && q.size(2) <= attn::kMaxDim, "head_dim must be a multiple of 16, at most ",
              attn::kMaxDim);
  TORCH_CHECK(block_tables.scalar_type() == at::kLong && lens.scalar_type() == at::kLong,
              "block tables and lengths are int64");
  TORCH_CHECK(block_tables.dim() == 2 && block_tables.size(0) == q.size(0) && lens.numel() == q.size(0),
              "one block-table row and one length per sequence");
  TORCH_CHECK(k_cache.is_contiguous() && v_cache.is_contiguous(), "caches must be contiguous");
  auto qc = q.contiguous();
  auto tables = block_tables.contiguous();
  auto lc = lens.contiguous();
  const int64_t max_len = tables.size(1) * k_cache.size(1);
  const int64_t* lp = lc.data_ptr<int64_t>();
  const int64_t* tp = tables.data_ptr<int64_t>();
  const int64_t num_blocks = k_cache.size(0), block_size = k_cache.size(1);
  for (int64_t b = 0; b < lc.numel(); ++b) {
    TORCH_CHECK(lp[b] >= 1 && lp[b] <= max_len, "length ", lp[b], " outside the block table (", max_len, ")");
    for (int64_t i = 0; i < (lp[b] + block_size - 1) / block_size; ++i) {
      const int64_t block = tp[b * tables.size(1) + i];
      TORCH_CHECK(block >= 0 && block < num_blocks, "block ", block, " outside the cache (", num_blocks, ")");
    }
  }
  return {qc, tables, lc};
}

at::Tensor decode_attention(const at::Tensor& q, const at::Tensor& k_cache, const at::Tensor& v_cache,
                            const at::Tensor& block_tables, const at::Tensor& lens, double scale) {
  auto [qc, tables, lc] = checked(q, k_cache, v_cache, block_tables, lens);
  TORCH_CHECK(k_cache.scalar_type() != at::kChar, "an int8 cache needs its scales (decode_attention_scaled_cpu)");
  const bool fp8 = k_cache.scalar_type() == at::kFloat8_e4m3fn;
  auto out = at::empty_like(qc);
  if (q.scalar_type() == at::kBFloat16) {
    if (fp8) decode_attention_impl<c10::BFloat16, c10::Float8_e4m3fn>(qc, k_cache, v_cache, tables, lc, scale, out);
    else decode_attention_impl<c10::BFloat16, c10::BFloat16>(qc, k_cache, v_cache, tables, lc, scale, out);
  } else {
    if (fp8) decode_attention_impl<float, c10::Float8_e4m3fn>(qc, k_cache, v_cache, tables, lc, scale, out);
    else decode_attention_impl<float, float>(qc, k_cache, v_cache, tables, lc, scale, out);
  }
  return out;
}

// decode_attention over an int8 cache (kv_cache_dtype="int8"): k_scale / v_scale [blocks, block_size, KVH]
// fp32 hold each cached row's scale.
at::Tensor decode_attention_scaled(const at::Tensor& q, const at::Tensor& k_cache, const at::Tensor& v_cache,
                                   const at::Tensor& k_scale, const at::Tensor& v_scale,
                                   const at::Tensor& block_tables, const at::Tensor& lens, double scale) {
  auto [qc, tables, lc] = checked(q, k_cache, v_cache, block_tables, lens);
  TORCH_CHECK(k_cache.scalar_type() == at::kChar, "decode_attention_scaled_cpu reads an int8 cache");
  const auto scale_shape = k_cache.sizes().slice(0, 3);
  TORCH_CHECK(k_scale.scalar_type() == at::kFloat && v_scale.scalar_type() == at::kFloat &&
                  k_scale.sizes() == scale_shape && v_scale.sizes() == scale_shape &&
                  k_scale.is_contiguous() && v_scale.is_contiguous(),
              "scales are contiguous fp32 [blocks, block_size, KVH]");
  auto out = at::empty_like(qc);
  const float* ks = k_scale.data_ptr<float>();
  const float* vs = v_scale.data_ptr<float>();
  if (q.scalar_type() == at::kBFloat16) {
    decode_attention_impl<c10::BFloat16, int8_t>(qc, k_cache, v_cache, tables, lc, scale, out, ks, vs);
  } else {
    decode_attention_impl<float, int8_t>(qc, k_cache, v_cache, tables, lc, scale, out, ks, vs);
  }
  return out;
}

// cache[slots] = x, as kv_cache_dtype.py's write_kv: an fp8 cache gets x clamped to e4m3's ±448
// (no infinity; an overflow must not become NaN) and copied as bytes (index_copy_ has no fp8 CPU kernel).
void write_kv(const at::Tensor& cache, const at::Tensor& slots, const at::Tensor& x) {
  if (cache.scalar_type() != at::kFloat8_e4m3fn) {
    cache.index_copy_(0, slots, x.to(cache.scalar_type()));
    return;
  }
  constexpr double kFp8Max = 448.0;
  const at::Tensor rounded = x.clamp(-kFp8Max, kFp8Max).to(at::kFloat8_e4m3fn);
  cache.view(at::kByte).index_copy_(0, slots, rounded.view(at::kByte));
}

// One decode step of one layer for the compiled graph: write this step's keys and values into
// their cache slots, then attend. The same two steps as layers/paged_decode_op.py's Python op,
// without its Python dispatch (~17 us per layer call, ~5% of a SmolLM2 batch-1 step). Like that
// op, the schema declares no mutation: the graph must not copy the whole KV pool to functionalise
// the write (compiled_decode.py), and each layer's caches are read only by its own call.
at::Tensor paged_decode(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& k_cache,
                        const at::Tensor& v_cache, const at::Tensor& slot_mapping, const at::Tensor& block_tables,
                        const at::Tensor& lens, double scale) {
  TORCH_CHECK(k_cache.dim() == 4 && k.dim() == 3 && v.sizes() == k.sizes(), "k/v [B, KVH, D], caches [blocks, block_size, KVH, D]");
  TORCH_CHECK(slot_mapping.scalar_type() == at::kLong && slot_mapping.numel() == k.size(0), "one int64 slot per sequence");
  TORCH_CHECK(k_cache.scalar_type() != at::kChar, "an int8 cache needs its scales (not paged_decode_cpu)");
  const int64_t kv_heads = k_cache.size(2), dim = k_cache.size(3);
  write_kv(k_cache.view({-1, kv_heads, dim}), slot_mapping, k);
  write_kv(v_cache.view({-1, kv_heads, dim}), slot_mapping, v);
  return decode_attention(q, k_cache, v_cache, block_tables, lens, scale).reshape({q.size(0), q.size(1) * q.size(2)});
}

}  // namespace

// A fragment: the ``blink`` namespace is shared with other extensions (int8_gemv defines it).
TORCH_LIBRARY_FRAGMENT(blink, m) {
  m.def("decode_attention_cpu(Tensor q, Tensor k_cache, Tensor v_cache, Tensor block_tables, Tensor lens, float scale) -> Tensor");
  m.def("decode_attention_scaled_cpu(Tensor q, Tensor k_cache, Tensor v_cache, Tensor k_scale, Tensor v_scale, "
        "Tensor block_tables, Tensor lens, float scale) -> Tensor");
  m.def("paged_decode_cpu(Tensor q, Tensor k, Tensor v, Tensor k_cache, Tensor v_cache, Tensor slot_mapping, "
        "Tensor block_tables, Tensor lens, float scale) -> Tensor");
}
TORCH_LIBRARY_IMPL(blink, CPU, m) {
  m.impl("decode_attention_cpu", &decode_attention);
  m.impl("decode_attention_scaled_cpu", &decode_attention_scaled);
  m.impl("paged_decode_cpu", &paged_decode);
}
