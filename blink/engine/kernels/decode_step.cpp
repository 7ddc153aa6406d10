// The whole forward of a decode step (1..kMaxRows rows: one new token of each sequence, or the
// 1 + K tokens of a speculative verification span) in one call: a Llama-family model with int8
// weights and bf16 activations, on AVX-512 CPUs.
//
// Why our own: the int8 weights of a SmolLM2 step stream in ~5 ms on 2 threads, yet the compiled
// (frozen) graph's step took 9.3-11 ms: Dynamo's guards on ~376 weight inputs (~1.5 ms), the
// graph's Python wrapper (~1.6 ms) and ~100 small kernels each with its own OpenMP fork/join.
// Here the weights are held once by a C++ object and a step is one OpenMP parallel region with
// barriers between dependent phases (llama.cpp's design): no per-op dispatch, no guards.
//
// Numerics are the eager bf16 path's (models/llama.py), rounding to bf16 at the same points:
// embedding bf16; x = bf16(hidden + residual); RMSNorm bf16(w * bf16(x * rsqrt(mean(x^2) + eps)))
// with the statistics in fp32; linear outputs bf16 (bias added in bf16); rope with bf16 cos/sin,
// bf16(bf16(x1 cos) - bf16(x2 sin)) | bf16(bf16(x2 cos) + bf16(x1 sin)); attention as
// decode_attention.h; K/V rounded into an fp8 or int8 cache as kv_cache_dtype.py's write_kv does;
// bf16(bf16(silu(gate)) * up) (silu from a table F.silu made); the LM head's
// bf16 output widened to fp32.
// The matmuls are int8_matmul.h's (fp32 accumulation; summation order may differ from aten's).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Float8_e4m3fn.h>
#include <torch/custom_class.h>
#include <torch/library.h>

#include <immintrin.h>
#include <omp.h>

#include "decode_attention.h"
#include "int8_matmul.h"
#include "rms_norm.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

namespace {

using bf16 = c10::BFloat16;
namespace attn = blink::attn;
namespace mm = blink::int8mm;

// Output rows of a matmul are split across threads in multiples of this (one 16-row block of the
// kernel, so no thread starts a block mid-way).
constexpr int64_t kRowAlign = 16;
// Cache-line alignment of the per-thread scratch (the kernel's vector loads).
constexpr int64_t kAlign = 64;
// Rows per thread from which attention runs one task per row (all KV heads, one after another: a
// row's K/V blocks stay in cache across its heads) rather than per (row, KV head): 2 leaves no
// thread idle for want of rows while keeping batch 1 (and 2 rows on 2 threads) split by head.
constexpr int64_t kRowTasks = 2;

inline float bf(float x) { return static_cast<float>(static_cast<bf16>(x)); }

// One int8 linear: weight [N, K] int8, scale [N] bf16, optional bias [N] bf16.
struct Linear {
  at::Tensor w, s, b;
  int64_t N = 0, K = 0;
  const int8_t* wp() const { return w.data_ptr<int8_t>(); }
  const bf16* sp() const { return s.data_ptr<bf16>(); }
  const bf16* bp() const { return b.defined() && b.numel() ? b.data_ptr<bf16>() : nullptr; }
};

struct Layer {
  at::Tensor in_norm, q_norm, k_norm, post_norm, k_cache, v_cache;
  at::Tensor k_scale, v_scale;  // an int8 cache's [blocks, block_size, KVH] fp32 row scales, else undefined
  Linear qkv, o, gate_up, down;
};

// The KV cache's element type (kv_cache_dtype.py): the model's bf16, fp8 e4m3 or row-scaled int8.
enum class CacheKind { kBf16, kFp8, kInt8 };

// The largest finite e4m3fn value (kv_cache_dtype.FP8_MAX); writes clamp to it (no infinity).
constexpr float kFp8Max = 448.f;
// Symmetric int8 rows span [-127, 127] (kv_cache_dtype.INT8_MAX).
constexpr float kInt8Max = 127.f;

// One head's dim values of src into the cache row dst as kv_cache_dtype.py's write_kv rounds them:
// bf16 as is; fp8 clamped to ±448 then rounded to e4m3 (c10's conversion, which aten's .to uses);
// int8 as round-half-even(x / s) with s = amax / 127 in fp32 (1 for an all-zero row) into *scale.
inline void store_row(const bf16* src, int64_t dim, CacheKind kind, void* dst, float* scale) {
  if (kind == CacheKind::kBf16) {
    std::memcpy(dst, src, dim * sizeof(bf16));
  } else if (kind == CacheKind::kFp8) {
    auto* out = static_cast<c10::Float8_e4m3fn*>(dst);
    for (int64_t d = 0; d < dim; ++d) {
      const float x = static_cast<float>(src[d]);
      out[d] = c10::Float8_e4m3fn(x < -kFp8Max ? -kFp8Max : (x > kFp8Max ? kFp8Max : x));  // NaN stays NaN
    }
  } else {
    float amax = 0.f;
    for (int64_t d = 0; d < dim; ++d) amax = std::max(amax, std::fabs(static_cast<float>(src[d])));
    const float s = amax > 0.f ? amax / kInt8Max : 1.f;
    auto* out = static_cast<int8_t*>(dst);
    for (int64_t d = 0; d < dim; ++d) {
      const float q = std::nearbyint(static_cast<float>(src[d]) / s);
      out[d] = static_cast<int8_t>(std::min(kInt8Max, std::max(-kInt8Max, q)));
    }
    *scale = s;
  }
}

// Rows [n0, n1) of N split across `threads` in kRowAlign multiples: thread t's share.
inline void split(int64_t N, int t, int threads, int64_t& n0, int64_t& n1) {
  const int64_t blocks = (N + kRowAlign - 1) / kRowAlign;
  const int64_t per = (blocks + threads - 1) / threads;
  n0 = std::min(N, t * per * kRowAlign);
  n1 = std::min(N, (t + 1) * per * kRowAlign);
}

// RMSNorm and the residual add before it: rms_norm.h, shared with the prefill ops.
using blink::norm::rms_norm;

// Rotate-half rope of one head in place (apply_rotary in rope.py), cos/sin rounded to bf16.
inline void rope(bf16* x, const float* cos_sin, int64_t dim) {
  const int64_t half = dim / 2;
  for (int64_t i = 0; i < half; ++i) {
    const float c = bf(cos_sin[i]), s = bf(cos_sin[half + i]);
    const float x1 = static_cast<float>(x[i]), x2 = static_cast<float>(x[half + i]);
    x[i] = static_cast<bf16>(bf(x1 * c) - bf(x2 * s));
    x[half + i] = static_cast<bf16>(bf(x2 * c) + bf(x1 * s));
  }
}

// Per-thread buffers, grown on demand and kept across steps.
struct ThreadScratch {
  std::vector<uint8_t> mm;              // the matmul kernel's prepared activations
  std::vector<bf16> x, xn;              // this step's residual stream and its normed copy [M, hidden]
  std::vector<float> attn, parts;       // attention: one chunk's scratch, a KV head's chunk partials
  std::vector<bf16> q;                  // the row's normed / rotated query heads [H, D]
  std::vector<bf16> head;               // one key head's normed / rotated copy
  void* mm_ptr() {
    auto p = reinterpret_cast<uintptr_t>(mm.data());
    return reinterpret_cast<void*>((p + kAlign - 1) / kAlign * kAlign);
  }
};

class DecodeStep : public torch::CustomClassHolder {
 public:
  // dims: hidden, intermediate, heads, kv_heads, head_dim, vocab, qk_norm (0/1).
  // globals: embedding [V, hidden] bf16, final norm [hidden], lm head weight [V, hidden] int8,
  //          its scale [V] bf16, cos_sin [max_pos, head_dim] fp32, silu_table [65536] bf16
  //          (F.silu of every bf16 bit pattern, see the MLP phase).
  // layers: per layer kPerLayer tensors in this order: input norm, qkv weight, scale, bias,
  //         q_norm, k_norm, o weight, scale, bias, post norm, gate_up weight, scale, bias,
  //         down weight, scale, bias, k_cache, v_cache ([blocks, block_size, KVH, D] bf16, fp8
  //         e4m3 or int8; every layer alike), k_scale, v_scale ([blocks, block_size, KVH] fp32
  //         for an int8 cache). An absent bias, q/k norm or scale is an empty tensor.
  static constexpr int64_t kPerLayer = 20;

  DecodeStep(std::vector<int64_t> dims, double eps, double scale, std::vector<at::Tensor> globals,
             std::vector<at::Tensor> layers)
      : eps_(static_cast<float>(eps)), scale_(static_cast<float>(scale)) {
    TORCH_CHECK(dims.size() == 7, "DecodeStep: 7 dims");
    hidden_ = dims[0], inter_ = dims[1], heads_ = dims[2], kv_heads_ = dims[3], dim_ = dims[4];
    vocab_ = dims[5], qk_norm_ = dims[6] != 0;
    TORCH_CHECK(dim_ % attn::kLanes == 0 && dim_ <= attn::kMaxDim && heads_ % kv_heads_ == 0 &&
                    heads_ / kv_heads_ <= attn::kMaxGroup,
                "DecodeStep: head_dim % 16, head_dim <= ", attn::kMaxDim, ", GQA group <= ", attn::kMaxGroup);
    TORCH_CHECK(globals.size() == 6, "DecodeStep: 6 global tensors");
    embed_ = bf16_tensor(globals[0], {vocab_, hidden_}, "embedding");
    final_norm_ = bf16_tensor(globals[1], {hidden_}, "final norm");
    lm_head_ = linear(globals[2], globals[3], at::Tensor(), vocab_, hidden_, "lm head");
    cos_sin_ = globals[4].contiguous();
    silu_ = bf16_tensor(globals[5], {65536}, "silu table");
    TORCH_CHECK(cos_sin_.scalar_type() == at::kFloat && cos_sin_.dim() == 2 && cos_sin_.size(1) == dim_,
                "DecodeStep: cos_sin [max_pos, head_dim] fp32");
    TORCH_CHECK(layers.size() % kPerLayer == 0, "DecodeStep: ", kPerLayer, " tensors per layer");
    const int64_t q_size = heads_ * dim_, kv_size = kv_heads_ * dim_;
    for (size_t i = 0; i < layers.size(); i += kPerLayer) {
      const at::Tensor* t = layers.data() + i;
      Layer l;
      l.in_norm = bf16_tensor(t[0], {hidden_}, "input norm");
      l.qkv = linear(t[1], t[2], t[3], q_size + 2 * kv_size, hidden_, "qkv");
      if (qk_norm_) {
        l.q_norm = bf16_tensor(t[4], {dim_}, "q norm");
        l.k_norm = bf16_tensor(t[5], {dim_}, "k norm");
      }
      l.o = linear(t[6], t[7], t[8], hidden_, q_size, "o");
      l.post_norm = bf16_tensor(t[9], {hidden_}, "post norm");
      l.gate_up = linear(t[10], t[11], t[12], 2 * inter_, hidden_, "gate_up");
      l.down = linear(t[13], t[14], t[15], hidden_, inter_, "down");
      l.k_cache = t[16], l.v_cache = t[17];
      const auto type = l.k_cache.scalar_type();
      const CacheKind kind = type == at::kChar               ? CacheKind::kInt8
                             : type == at::kFloat8_e4m3fn ? CacheKind::kFp8
                                                          : CacheKind::kBf16;
      if (layers_.empty()) kind_ = kind;
      TORCH_CHECK((type == at::kBFloat16 || kind != CacheKind::kBf16) && kind == kind_ && l.k_cache.is_contiguous() &&
                      l.v_cache.sizes() == l.k_cache.sizes() && l.v_cache.is_contiguous() &&
                      l.v_cache.scalar_type() == type && l.k_cache.dim() == 4 &&
                      l.k_cache.size(2) == kv_heads_ && l.k_cache.size(3) == dim_,
                  "DecodeStep: caches [blocks, block_size, KVH, D] bf16, fp8 or int8 (all layers alike), contiguous");
      if (kind == CacheKind::kInt8) {
        const auto scale_shape = l.k_cache.sizes().slice(0, 3);
        for (const at::Tensor* sc : {&t[18], &t[19]})
          TORCH_CHECK(sc->scalar_type() == at::kFloat && sc->sizes() == scale_shape && sc->is_contiguous(),
                      "DecodeStep: an int8 cache needs contiguous fp32 scales [blocks, block_size, KVH]");
        l.k_scale = t[18], l.v_scale = t[19];
      }
      layers_.push_back(std::move(l));
    }
    TORCH_CHECK(!layers_.empty(), "DecodeStep: no layers");
  }

  // Float32 logits [M, vocab] of one decode step: row m adds token input_ids[m] at positions[m]
  // (cache slot slot_mapping[m]) and attends to its first context_lens[m] cached positions
  // (this token included) through block_tables[m]. Several rows may belong to one sequence (a
  // speculative verification span: consecutive positions, the same table): every row's K/V is
  // then in the cache before any row of the layer attends (see forward()).
  at::Tensor run(at::Tensor input_ids, at::Tensor positions, at::Tensor slot_mapping, at::Tensor block_tables,
                 at::Tensor context_lens) {
    const int64_t M = input_ids.numel();
    TORCH_CHECK(M >= 1 && M <= mm::kMaxRows, "DecodeStep: 1 to ", mm::kMaxRows, " rows, got ", M);
    for (const at::Tensor* t : {&input_ids, &positions, &slot_mapping, &context_lens})
      TORCH_CHECK(t->scalar_type() == at::kLong && t->numel() == M, "DecodeStep: one int64 per row");
    TORCH_CHECK(block_tables.scalar_type() == at::kLong && block_tables.dim() == 2 && block_tables.size(0) == M,
                "DecodeStep: block_tables [M, W] int64");
    auto ids = input_ids.contiguous(), pos = positions.contiguous(), slots = slot_mapping.contiguous();
    auto tables = block_tables.contiguous(), lens = context_lens.contiguous();
    const int64_t* idp = ids.data_ptr<int64_t>();
    const int64_t* pp = pos.data_ptr<int64_t>();
    const int64_t* sp = slots.data_ptr<int64_t>();
    const int64_t* tp = tables.data_ptr<int64_t>();
    const int64_t* lp = lens.data_ptr<int64_t>();
    const int64_t width = tables.size(1);
    const int64_t num_blocks = layers_[0].k_cache.size(0), block_size = layers_[0].k_cache.size(1);
    int64_t max_len = 1;
    for (int64_t m = 0; m < M; ++m) {
      TORCH_CHECK(idp[m] >= 0 && idp[m] < vocab_, "DecodeStep: token id ", idp[m], " outside the vocabulary");
      TORCH_CHECK(pp[m] >= 0 && pp[m] < cos_sin_.size(0), "DecodeStep: position ", pp[m], " outside the rope table");
      TORCH_CHECK(sp[m] >= 0 && sp[m] < num_blocks * block_size, "DecodeStep: slot ", sp[m], " outside the cache");
      TORCH_CHECK(lp[m] >= 1 && lp[m] <= width * block_size, "DecodeStep: length ", lp[m], " outside the table");
      for (int64_t i = 0; i < (lp[m] + block_size - 1) / block_size; ++i) {
        const int64_t block = tp[m * width + i];
        TORCH_CHECK(block >= 0 && block < num_blocks, "DecodeStep: block ", block, " outside the cache");
      }
      max_len = std::max(max_len, lp[m]);
    }
    // Rows of one sequence share their first block; so may distinct sequences sharing a cached
    // prefix, which only costs them a barrier per layer they did not need.
    bool shared = false;
    for (int64_t m = 1; m < M && !shared; ++m)
      for (int64_t o = 0; o < m && !shared; ++o) shared = tp[m * width] == tp[o * width];
    const int threads = std::max(1, at::get_num_threads());
    reserve(M, max_len, threads);
    auto out = at::empty({M, vocab_}, at::TensorOptions().dtype(at::kFloat));
    Step step{M, idp, pp, sp, tp, width, block_size, lp, out.data_ptr<float>(), shared};
#pragma omp parallel num_threads(threads)
    forward(step, omp_get_thread_num(), omp_get_num_threads());
    return out;
  }

 private:
  struct Step {
    int64_t M;
    const int64_t *ids, *pos, *slots, *tables;
    int64_t width, block_size;
    const int64_t* lens;
    float* out;
    bool shared;  // some rows read K/V another row of this step writes (a verification span)
  };

  static at::Tensor bf16_tensor(const at::Tensor& t, std::vector<int64_t> shape, const char* what) {
    TORCH_CHECK(t.scalar_type() == at::kBFloat16 && t.sizes() == at::IntArrayRef(shape), "DecodeStep: ", what,
                " must be bf16 of shape ", at::IntArrayRef(shape), ", got ", t.sizes());
    return t.contiguous();
  }

  static Linear linear(const at::Tensor& w, const at::Tensor& s, const at::Tensor& b, int64_t N, int64_t K,
                       const char* what) {
    TORCH_CHECK(w.scalar_type() == at::kChar && w.dim() == 2 && w.size(0) == N && w.size(1) == K,
                "DecodeStep: ", what, " weight must be int8 [", N, ", ", K, "], got ", w.sizes());
    TORCH_CHECK(K % 16 == 0, "DecodeStep: ", what, " K % 16 != 0");
    Linear l;
    l.w = w.contiguous(), l.N = N, l.K = K;
    l.s = bf16_tensor(s, {N}, what);
    if (b.defined() && b.numel()) l.b = bf16_tensor(b, {N}, what);
    return l;
  }

  // Grow the shared and per-thread buffers for M rows, contexts up to max_len, `threads` threads.
  void reserve(int64_t M, int64_t max_len, int threads) {
    const int64_t q_size = heads_ * dim_, qkv = (heads_ + 2 * kv_heads_) * dim_;
    const int64_t widest = std::max({hidden_, q_size, inter_});
    hidden_buf_.resize(M * hidden_);
    resid_.resize(M * hidden_);
    qkv_.resize(M * qkv);
    attn_.resize(M * q_size);
    gate_up_.resize(M * 2 * inter_);
    act_.resize(M * inter_);
    logits_.resize(M * vocab_);
    if (static_cast<int>(scratch_.size()) < threads) scratch_.resize(threads);
    for (int t = 0; t < threads; ++t) {
      ThreadScratch& s = scratch_[t];
      const auto mm_bytes = static_cast<size_t>(mm::scratch_bytes(M, widest) + kAlign);
      if (s.mm.size() < mm_bytes) s.mm.resize(mm_bytes);
      if (static_cast<int64_t>(s.x.size()) < M * hidden_) s.x.resize(M * hidden_), s.xn.resize(M * hidden_);
      const int64_t group = heads_ / kv_heads_;
      s.attn.resize(attn::chunk_scratch_floats(group, dim_)), s.q.resize(heads_ * dim_), s.head.resize(dim_);
      const int64_t parts = attn::chunks_of(max_len) * attn::partial_floats(group, dim_);
      if (static_cast<int64_t>(s.parts.size()) < parts) s.parts.resize(parts);
    }
  }

  // y[m, n] for n in [n0, n1): the kernel's bf16 output, then bf16(y + bias) where biased.
  static void matmul_rows(const Linear& l, const void* prepared, int64_t M, bf16* y, int64_t ldy, int64_t n0,
                          int64_t n1) {
    if (n0 >= n1) return;
    mm::rows(prepared, M, l.K, l.wp(), l.sp(), y, ldy, n0, n1);
    if (const bf16* b = l.bp())
      for (int64_t m = 0; m < M; ++m)
        for (int64_t n = n0; n < n1; ++n)
          y[m * ldy + n] = static_cast<bf16>(static_cast<float>(y[m * ldy + n]) + static_cast<float>(b[n]));
  }

  // x = hidden + resid (or the embedding, first layer) for every row, then its norm into xn.
  void residual_norm(const Step& st, ThreadScratch& s, const bf16* norm_w, bool first) {
    const bf16* e = embed_.data_ptr<bf16>();
    for (int64_t m = 0; m < st.M; ++m) {
      bf16* x = s.x.data() + m * hidden_;
      if (first) {
        std::memcpy(x, e + st.ids[m] * hidden_, hidden_ * sizeof(bf16));
      } else {
        const bf16* h = hidden_buf_.data() + m * hidden_;
        const bf16* r = resid_.data() + m * hidden_;
        blink::norm::add(h, r, hidden_, x);
      }
      rms_norm(x, norm_w, hidden_, eps_, s.xn.data() + m * hidden_);
    }
  }

  // Rows m with m % threads == t copy this thread's x (every thread computed the same) into resid.
  void store_residual(const Step& st, const ThreadScratch& s, int t, int threads) {
    for (int64_t m = t; m < st.M; m += threads)
      std::memcpy(resid_.data() + m * hidden_, s.x.data() + m * hidden_, hidden_ * sizeof(bf16));
  }

  // One (row m, KV head h) task, first half: k norm (Qwen3) and rope, this row's K/V into the cache.
  void write_kv(const Step& st, const Layer& l, ThreadScratch& s, int64_t m, int64_t h) {
    const int64_t q_size = heads_ * dim_, kv_size = kv_heads_ * dim_;
    const float* cs = cos_sin_.data_ptr<float>() + st.pos[m] * dim_;
    const bf16* row = qkv_.data() + m * (q_size + 2 * kv_size);
    bf16* head = s.head.data();
    const int64_t element = st.slots[m] * kv_size + h * dim_;  // the row's first element in the cache
    const int64_t scale_at = st.slots[m] * kv_heads_ + h;       // its int8 scale
    if (qk_norm_) rms_norm(row + q_size + h * dim_, l.k_norm.data_ptr<bf16>(), dim_, eps_, head);
    else std::memcpy(head, row + q_size + h * dim_, dim_ * sizeof(bf16));
    rope(head, cs, dim_);
    const int64_t bytes = l.k_cache.element_size();
    auto* kc = static_cast<uint8_t*>(l.k_cache.data_ptr()) + element * bytes;
    auto* vc = static_cast<uint8_t*>(l.v_cache.data_ptr()) + element * bytes;
    const bool scaled = kind_ == CacheKind::kInt8;
    store_row(head, dim_, kind_, kc, scaled ? l.k_scale.data_ptr<float>() + scale_at : nullptr);
    store_row(row + q_size + kv_size + h * dim_, dim_, kind_, vc, scaled ? l.v_scale.data_ptr<float>() + scale_at : nullptr);
  }

  // Query head hq of row m normed (Qwen3) and rotated into s.q (bf16, as the eager path rounds it).
  void rotate_query(const Step& st, const Layer& l, ThreadScratch& s, int64_t m, int64_t hq) const {
    const int64_t q_size = heads_ * dim_, kv_size = kv_heads_ * dim_;
    const float* cs = cos_sin_.data_ptr<float>() + st.pos[m] * dim_;
    const bf16* row = qkv_.data() + m * (q_size + 2 * kv_size);
    bf16* head = s.q.data() + hq * dim_;
    if (qk_norm_) rms_norm(row + hq * dim_, l.q_norm.data_ptr<bf16>(), dim_, eps_, head);
    else std::memcpy(head, row + hq * dim_, dim_ * sizeof(bf16));
    rope(head, cs, dim_);
  }

  // Attention of KV head h's query heads (already in s.q) over row m's cached positions (its own
  // K/V included): decode_attention.h's per-head math, chunk by chunk, as the eager kernel does.
  void attend_head(const Step& st, const Layer& l, ThreadScratch& s, int64_t m, int64_t h) {
    const int64_t q_size = heads_ * dim_, kv_size = kv_heads_ * dim_, group = heads_ / kv_heads_;
    const attn::PagedSeq seq{st.tables + m * st.width, st.block_size, kv_size, st.lens[m]};
    const bf16* q = s.q.data() + h * group * dim_;
    bf16* out = attn_.data() + m * q_size + h * group * dim_;
    float *sc = s.attn.data(), *parts = s.parts.data();
    switch (kind_) {
      case CacheKind::kBf16:
        attn::attend_kv_head<bf16, bf16, bf16>(q, scale_, group, dim_, l.k_cache.data_ptr<bf16>(),
                                               l.v_cache.data_ptr<bf16>(), seq, h, sc, parts, out);
        break;
      case CacheKind::kFp8:
        attn::attend_kv_head<bf16, bf16, c10::Float8_e4m3fn>(q, scale_, group, dim_,
                                                             l.k_cache.data_ptr<c10::Float8_e4m3fn>(),
                                                             l.v_cache.data_ptr<c10::Float8_e4m3fn>(), seq, h, sc,
                                                             parts, out);
        break;
      case CacheKind::kInt8:
        attn::attend_kv_head<bf16, bf16, int8_t>(q, scale_, group, dim_, l.k_cache.data_ptr<int8_t>(),
                                                 l.v_cache.data_ptr<int8_t>(), seq, h, sc, parts, out,
                                                 l.k_scale.data_ptr<float>(), l.v_scale.data_ptr<float>());
        break;
    }
  }

  // The group of KV head h of row m (the split by (row, KV head) at small batches).
  void attend(const Step& st, const Layer& l, ThreadScratch& s, int64_t m, int64_t h) {
    const int64_t group = heads_ / kv_heads_;
    for (int64_t g = 0; g < group; ++g) rotate_query(st, l, s, m, h * group + g);
    attend_head(st, l, s, m, h);
  }

  // All KV heads of row m in one task (at wide batches): the same per-head math as attend.
  void attend_row(const Step& st, const Layer& l, ThreadScratch& s, int64_t m) {
    for (int64_t hq = 0; hq < heads_; ++hq) rotate_query(st, l, s, m, hq);
    for (int64_t h = 0; h < kv_heads_; ++h) attend_head(st, l, s, m, h);
  }

  // Thread t's whole step; barriers separate the phases that read what another thread wrote.
  void forward(const Step& st, int t, int threads) {
    ThreadScratch& s = scratch_[t];
    void* prep = s.mm_ptr();
    const int64_t M = st.M, q_size = heads_ * dim_;
    int64_t n0, n1;
    for (size_t li = 0; li < layers_.size(); ++li) {
      const Layer& l = layers_[li];
      // 1. residual + input norm (every thread, all rows), then this thread's qkv rows.
      residual_norm(st, s, l.in_norm.data_ptr<bf16>(), li == 0);
      mm::prepare(s.xn.data(), hidden_, M, hidden_, prep);
      split(l.qkv.N, t, threads, n0, n1);
      matmul_rows(l.qkv, prep, M, qkv_.data(), l.qkv.N, n0, n1);
#pragma omp barrier
      // 2. residual stored; rope, cache writes and attention per (row, KV head). When rows read
      // each other's K/V (a verification span: row p attends to the span's rows before it), all
      // writes finish before any attention reads; otherwise each task writes then reads its own.
      // With at least kRowTasks rows per thread, attention runs one task per row (all its heads:
      // attend_row); fewer rows split by (row, KV head) so every thread works.
      store_residual(st, s, t, threads);
      const bool by_row = M >= kRowTasks * threads;
      if (st.shared) {
        for (int64_t task = t; task < M * kv_heads_; task += threads)
          write_kv(st, l, s, task / kv_heads_, task % kv_heads_);
#pragma omp barrier
        if (by_row) {
          for (int64_t m = t; m < M; m += threads) attend_row(st, l, s, m);
        } else {
          for (int64_t task = t; task < M * kv_heads_; task += threads)
            attend(st, l, s, task / kv_heads_, task % kv_heads_);
        }
      } else if (by_row) {
        for (int64_t m = t; m < M; m += threads) {
          for (int64_t h = 0; h < kv_heads_; ++h) write_kv(st, l, s, m, h);
          attend_row(st, l, s, m);
        }
      } else {
        for (int64_t task = t; task < M * kv_heads_; task += threads) {
          write_kv(st, l, s, task / kv_heads_, task % kv_heads_);
          attend(st, l, s, task / kv_heads_, task % kv_heads_);
        }
      }
#pragma omp barrier
      // 3. o projection.
      mm::prepare(attn_.data(), q_size, M, q_size, prep);
      split(hidden_, t, threads, n0, n1);
      matmul_rows(l.o, prep, M, hidden_buf_.data(), hidden_, n0, n1);
#pragma omp barrier
      // 4. residual + post norm, this thread's gate and up rows, silu(gate) * up on them.
      residual_norm(st, s, l.post_norm.data_ptr<bf16>(), false);
      mm::prepare(s.xn.data(), hidden_, M, hidden_, prep);
      split(inter_, t, threads, n0, n1);
      matmul_rows(l.gate_up, prep, M, gate_up_.data(), 2 * inter_, n0, n1);
      matmul_rows(l.gate_up, prep, M, gate_up_.data(), 2 * inter_, inter_ + n0, inter_ + n1);
      // bf16(silu(gate)) is looked up: the gate is bf16, so a 65536-entry table made by F.silu
      // itself is eager's result by construction, and scalar expf per element cost ~10% of a
      // batch-1 step (py-spy, SmolLM2 shape, 1 thread).
      const bf16* silu = silu_.data_ptr<bf16>();
      for (int64_t m = 0; m < M; ++m) {
        const bf16* g = gate_up_.data() + m * 2 * inter_;
        bf16* a = act_.data() + m * inter_;
        for (int64_t n = n0; n < n1; ++n)
          a[n] = static_cast<bf16>(static_cast<float>(silu[g[n].x]) * static_cast<float>(g[inter_ + n]));
      }
#pragma omp barrier
      // 5. residual stored; down projection.
      store_residual(st, s, t, threads);
      mm::prepare(act_.data(), inter_, M, inter_, prep);
      split(hidden_, t, threads, n0, n1);
      matmul_rows(l.down, prep, M, hidden_buf_.data(), hidden_, n0, n1);
#pragma omp barrier
    }
    // Final norm and this thread's LM head rows, widened to fp32.
    residual_norm(st, s, final_norm_.data_ptr<bf16>(), false);
    mm::prepare(s.xn.data(), hidden_, M, hidden_, prep);
    split(vocab_, t, threads, n0, n1);
    matmul_rows(lm_head_, prep, M, logits_.data(), vocab_, n0, n1);
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = n0; n < n1; ++n) st.out[m * vocab_ + n] = static_cast<float>(logits_[m * vocab_ + n]);
  }

  float eps_, scale_;
  int64_t hidden_ = 0, inter_ = 0, heads_ = 0, kv_heads_ = 0, dim_ = 0, vocab_ = 0;
  bool qk_norm_ = false;
  CacheKind kind_ = CacheKind::kBf16;
  at::Tensor embed_, final_norm_, cos_sin_, silu_;
  Linear lm_head_;
  std::vector<Layer> layers_;
  // Shared activations [M, ...] bf16, grown on demand.
  std::vector<bf16> hidden_buf_, resid_, qkv_, attn_, gate_up_, act_, logits_;
  std::vector<ThreadScratch> scratch_;
};

}  // namespace

// A fragment: the ``blink`` namespace is shared with the other kernels.
TORCH_LIBRARY_FRAGMENT(blink, m) {
  m.class_<DecodeStep>("DecodeStep")
      .def(torch::init<std::vector<int64_t>, double, double, std::vector<at::Tensor>, std::vector<at::Tensor>>())
      .def("run", &DecodeStep::run);
}
