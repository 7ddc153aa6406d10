// blink::rope_write_kv: a layer's rotary embedding of q and k and its K/V cache write in one call,
// one pass over the rows split across torch's threads, where eager takes ~10 aten ops (chunk,
// 4 mul, sub, add, cat, then index_copy_ per K and V).
//   rope_write_kv(q [T, H, D], k [T, KVH, D], v [T, KVH, D], cos [T, (1,) D/2], sin [T, (1,) D/2],
//                 slots [T] int64, k_cache!, v_cache! [blocks, block_size, KVH, D])
//     -> (rotated q [T, H, D], rotated k [T, KVH, D]), both contiguous;
//   k_cache[slots] = rotated k and v_cache[slots] = v (the flat [slots, KVH, D] views).
// Numerics are apply_rotary's (layers/rope.py), rotate-half: out1 = x1 cos - x2 sin,
// out2 = x2 cos + x1 sin, each product and each sum rounded to the tensors' dtype as the separate
// aten ops round them: bf16(bf16(x1 cos) - bf16(x2 sin)) in bf16, plain fp32 ops in fp32 (built
// with -ffp-contract=off, rope_kv.py, so the compiler cannot fuse a product and a sum into one FMA
// with one rounding). cos/sin are the caller's, already in the tensors' dtype (RotaryEmbedding.lookup).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>
#include <torch/library.h>

#include <immintrin.h>

#include "bf16_simd.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <tuple>

namespace {

using bf16 = c10::BFloat16;
namespace simd = blink::simd;

// Elements per task: an OpenMP fork/join costs a few us, a 64-wide head row well under 0.1 us, so
// rows go out in chunks of at least this many elements; a 16-row decode step stays on one thread.
constexpr int64_t kMinTaskElems = 32 * 1024;

// 16 lanes of T as fp32, and the rounding the eager op applies after each product and sum.
template <typename T>
struct Lanes;

template <>
struct Lanes<bf16> {
  static __m512 load(const bf16* p, __mmask16 m) { return simd::load_bf16(p, m); }
  static __m512 round(__m512 x) { return simd::round_bf16(x); }
  static void store(bf16* p, __m512 x, __mmask16 m) { simd::store_bf16(p, x, m); }
};

template <>
struct Lanes<float> {
  static __m512 load(const float* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
  static __m512 round(__m512 x) { return x; }
  static void store(float* p, __m512 x, __mmask16 m) { _mm512_mask_storeu_ps(p, m, x); }
};

// One head row x [D] rotated into out (and into out2 when not null: the cache slot).
template <typename T>
inline void rotate(const T* x, const T* cos, const T* sin, int64_t half, T* out, T* out2) {
  using L = Lanes<T>;
  for (int64_t i = 0; i < half; i += 16) {
    const __mmask16 m = simd::lanes(i, half);
    const __m512 x1 = L::load(x + i, m), x2 = L::load(x + half + i, m);
    const __m512 c = L::load(cos + i, m), s = L::load(sin + i, m);
    const __m512 lo = _mm512_sub_ps(L::round(_mm512_mul_ps(x1, c)), L::round(_mm512_mul_ps(x2, s)));
    const __m512 hi = _mm512_add_ps(L::round(_mm512_mul_ps(x2, c)), L::round(_mm512_mul_ps(x1, s)));
    L::store(out + i, lo, m);
    L::store(out + half + i, hi, m);
    if (out2 != nullptr) {
      L::store(out2 + i, lo, m);
      L::store(out2 + half + i, hi, m);
    }
  }
}

// [T, heads, D] with a contiguous last dim; cos/sin [T, D/2] or [T, 1, D/2].
void check_heads(const at::Tensor& x, const char* name, int64_t tokens, int64_t dim) {
  TORCH_CHECK(x.dim() == 3 && x.size(0) == tokens && x.size(2) == dim, "rope_write_kv: ", name,
              " must be [T, heads, head_dim] with the T and head_dim of q");
  TORCH_CHECK(x.stride(2) == 1, "rope_write_kv: ", name, "'s head rows must be contiguous");
}

void check_table(const at::Tensor& t, const char* name, int64_t tokens, int64_t half) {
  TORCH_CHECK((t.dim() == 2 || (t.dim() == 3 && t.size(1) == 1)) && t.size(0) == tokens && t.size(-1) == half &&
                  t.stride(-1) == 1,
              "rope_write_kv: ", name, " must be [T, head_dim/2] or [T, 1, head_dim/2] with contiguous rows");
}

template <typename T>
void run(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& cos,
         const at::Tensor& sin, const int64_t* slot, at::Tensor& k_cache, at::Tensor& v_cache,
         at::Tensor& q_out, at::Tensor& k_out) {
  const int64_t tokens = q.size(0), heads = q.size(1), kv_heads = k.size(1), dim = q.size(2), half = dim / 2;
  const int64_t rows_per_token = heads + kv_heads, cs = cos.stride(0), ss = sin.stride(0);
  const T *qp = q.data_ptr<T>(), *kp = k.data_ptr<T>(), *vp = v.data_ptr<T>();
  const T *cp = cos.data_ptr<T>(), *sp = sin.data_ptr<T>();
  T *qo = q_out.data_ptr<T>(), *ko = k_out.data_ptr<T>();
  T *kc = k_cache.data_ptr<T>(), *vc = v_cache.data_ptr<T>();
  const int64_t slot_elems = kv_heads * dim;
  const int64_t qs0 = q.stride(0), qs1 = q.stride(1), ks0 = k.stride(0), ks1 = k.stride(1);
  const int64_t vs0 = v.stride(0), vs1 = v.stride(1);
  at::parallel_for(0, tokens * rows_per_token, std::max<int64_t>(1, kMinTaskElems / dim), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t t = r / rows_per_token, h = r % rows_per_token;
      const T *c = cp + t * cs, *s = sp + t * ss;
      if (h < heads) {
        rotate<T>(qp + t * qs0 + h * qs1, c, s, half, qo + (t * heads + h) * dim, nullptr);
        continue;
      }
      const int64_t g = h - heads, cached = slot[t] * slot_elems + g * dim;
      rotate<T>(kp + t * ks0 + g * ks1, c, s, half, ko + (t * kv_heads + g) * dim, kc + cached);
      std::memcpy(vc + cached, vp + t * vs0 + g * vs1, dim * sizeof(T));
    }
  });
}

std::tuple<at::Tensor, at::Tensor> rope_write_kv(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                                 const at::Tensor& cos, const at::Tensor& sin,
                                                 const at::Tensor& slots, at::Tensor& k_cache, at::Tensor& v_cache) {
  TORCH_CHECK(q.dim() == 3 && q.size(2) % 2 == 0, "rope_write_kv: q must be [T, H, head_dim], head_dim even");
  const int64_t tokens = q.size(0), dim = q.size(2), half = dim / 2;
  TORCH_CHECK(q.stride(2) == 1, "rope_write_kv: q's head rows must be contiguous");
  check_heads(k, "k", tokens, dim);
  check_heads(v, "v", tokens, dim);
  TORCH_CHECK(v.size(1) == k.size(1), "rope_write_kv: k and v must have the same KV heads");
  check_table(cos, "cos", tokens, half);
  check_table(sin, "sin", tokens, half);
  const auto dtype = q.scalar_type();
  TORCH_CHECK(dtype == at::kBFloat16 || dtype == at::kFloat, "rope_write_kv: bf16 or fp32 only");
  for (const at::Tensor* t : std::initializer_list<const at::Tensor*>{&k, &v, &cos, &sin, &k_cache, &v_cache})
    TORCH_CHECK(t->scalar_type() == dtype, "rope_write_kv: q, k, v, cos, sin and the caches must share a dtype");
  const int64_t kv_heads = k.size(1);
  for (const at::Tensor* c : std::initializer_list<const at::Tensor*>{&k_cache, &v_cache})
    TORCH_CHECK(c->is_contiguous() && c->dim() >= 2 && c->size(-1) == dim && c->size(-2) == kv_heads,
                "rope_write_kv: caches must be contiguous [..., KV heads, head_dim]");
  TORCH_CHECK(v_cache.sizes() == k_cache.sizes(), "rope_write_kv: k_cache and v_cache must have one shape");
  TORCH_CHECK(slots.dim() == 1 && slots.size(0) == tokens && slots.scalar_type() == at::kLong,
              "rope_write_kv: slots must be [T] int64");
  const auto slots_c = slots.contiguous();
  const int64_t* slot = slots_c.data_ptr<int64_t>();
  const int64_t num_slots = k_cache.numel() / (kv_heads * dim);
  for (int64_t t = 0; t < tokens; ++t)  // as index_copy_: an error, never a write outside the pool
    TORCH_CHECK(slot[t] >= 0 && slot[t] < num_slots, "rope_write_kv: slot ", slot[t], " outside the cache's ",
                num_slots);
  auto q_out = at::empty({tokens, q.size(1), dim}, q.options());
  auto k_out = at::empty({tokens, kv_heads, dim}, q.options());
  if (dtype == at::kBFloat16)
    run<bf16>(q, k, v, cos, sin, slot, k_cache, v_cache, q_out, k_out);
  else
    run<float>(q, k, v, cos, sin, slot, k_cache, v_cache, q_out, k_out);
  return {q_out, k_out};
}

}  // namespace

// FRAGMENT: the blink namespace is shared with the other kernel libraries.
TORCH_LIBRARY_FRAGMENT(blink, m) {
  m.def(
      "rope_write_kv(Tensor q, Tensor k, Tensor v, Tensor cos, Tensor sin, Tensor slots, Tensor(a!) k_cache, "
      "Tensor(b!) v_cache) -> (Tensor, Tensor)");
}
TORCH_LIBRARY_IMPL(blink, CPU, m) { m.impl("rope_write_kv", &rope_write_kv); }
