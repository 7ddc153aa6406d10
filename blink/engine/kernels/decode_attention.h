// Decode attention of one (sequence, KV head) for the fused step (decode_step.cpp): the same
// operations in the same order as decode_attention.cpp's per-sequence loop (the eager and compiled
// paths), which shares load16/exp_row from here, so both round alike bit for bit, for bf16 / fp32,
// fp8 (e4m3) and int8 (row-scaled) caches alike.
//
// Scores in fp32 (q pre-scaled in fp32), an fp32 softmax with exp16 (simd_exp.h), the weighted
// sum of values accumulated in fp32 in position order, one rounding to the output dtype.
#pragma once

#include <c10/util/BFloat16.h>
#include <c10/util/Float8_e4m3fn.h>

#include <immintrin.h>

#include "simd_exp.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>

namespace blink::attn {

constexpr int64_t kLanes = 16;  // fp32 lanes of one AVX-512 register
// The widest head attend_kv_head takes (its key buffer on the stack); Llama-family heads are 64-256.
constexpr int64_t kMaxDim = 512;

inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }

// bf16 -> fp32 is the bf16 bits in the high half of an fp32 word (exact).
inline __m512 load16(const c10::BFloat16* p) {
  const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16));
}

// e4m3fn -> fp32 (exact) for an fp8 KV cache (kv_cache_dtype.py). No fp8 instructions on these
// CPUs: each byte S.EEEE.MMM is rebuilt as the fp16 S.0EEEE.MMM0000000, whose value is the e4m3
// value times 2^-8 (fp16's exponent bias is 15, e4m3's 7) for normal and subnormal bytes alike;
// vcvtph2ps widens that exactly and one multiply by 2^8 restores the scale. The NaN bytes (0x7F,
// 0xFF) would read as ±480; the cache never holds them (writes clamp to ±448).
inline __m512 load16(const c10::Float8_e4m3fn* p) {
  const __m256i bytes = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  const __m256i sign = _mm256_slli_epi16(_mm256_and_si256(bytes, _mm256_set1_epi16(0x80)), 8);
  const __m256i magnitude = _mm256_slli_epi16(_mm256_and_si256(bytes, _mm256_set1_epi16(0x7F)), 7);
  const __m512 scaled = _mm512_cvtph_ps(_mm256_or_si256(sign, magnitude));
  return _mm512_mul_ps(scaled, _mm512_set1_ps(256.f));
}

// int8 -> fp32 (exact) for an int8 KV cache; its row scale is applied to the score / weight.
inline __m512 load16(const int8_t* p) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}

// softmax numerators of one row in place; returns their sum.
inline float exp_row(float* s, int64_t n) {
  float m = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < n; ++j) m = std::max(m, s[j]);
  const __m512 mv = _mm512_set1_ps(m);
  __m512 sum = _mm512_setzero_ps();
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    const __m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(s + j), mv));
    _mm512_storeu_ps(s + j, e);
    sum = _mm512_add_ps(sum, e);
  }
  if (j < n) {
    const __mmask16 tail = static_cast<__mmask16>((1u << (n - j)) - 1);
    const __m512 e = exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(tail, s + j), mv));
    _mm512_mask_storeu_ps(s + j, tail, e);
    sum = _mm512_add_ps(sum, _mm512_maskz_mov_ps(tail, e));
  }
  return _mm512_reduce_add_ps(sum);
}

// Where one sequence's cached positions live: position j of KV head h is at
// base + (table[j / block_size] * block_size + j % block_size) * slot_stride + h * dim.
struct PagedSeq {
  const int64_t* table;
  int64_t block_size;
  int64_t slot_stride;  // elements between consecutive cache slots (KV heads * dim)
  int64_t len;          // cached positions attended
  int64_t slot_index(int64_t j) const { return table[j / block_size] * block_size + j % block_size; }
  template <typename T>
  const T* slot(const T* base, int64_t j) const {
    return base + slot_index(j) * slot_stride;
  }
};

// Where a sequence's value rows live (and an int8 cache's row scales, else nullptr).
template <typename C>
struct ValueRows {
  const C* base;
  const int64_t* table;
  int64_t block_size, slot_stride, kv_heads, dim, n;
  const float* scales;
};

// acc[(hq + g) * dim + (i + c) * 16 ...] = sum over positions j, in order, of weight(hq + g, j) *
// V[j, h, chunk i + c], for g < G and c < NI, in registers: accumulating all query heads of all
// chunks at once in memory (load, fma, store per position) made the value loop store-bound.
// Shared by decode_attention.cpp's per-sequence loop and attend_kv_head, so both run the same FMAs
// per element in the same order.
template <int G, int NI, typename C>
inline void accumulate_values_n(const ValueRows<C>& r, int64_t h, int64_t i, int64_t hq, const float* scores,
                                float* acc) {
  constexpr bool kScaled = std::is_same_v<C, int8_t>;
  __m512 a[G][NI];
  for (int g = 0; g < G; ++g)
    for (int c = 0; c < NI; ++c) a[g][c] = _mm512_setzero_ps();
  for (int64_t j = 0; j < r.n; ++j) {
    const int64_t slot_index = r.table[j / r.block_size] * r.block_size + j % r.block_size;
    const C* row = r.base + slot_index * r.slot_stride + h * r.dim + i * kLanes;
    __m512 v[NI];
    for (int c = 0; c < NI; ++c) v[c] = load16(row + c * kLanes);
    for (int g = 0; g < G; ++g) {
      float w = scores[(hq + g) * r.n + j];
      if constexpr (kScaled) w *= r.scales[slot_index * r.kv_heads + h];
      const __m512 wv = _mm512_set1_ps(w);
      for (int c = 0; c < NI; ++c) a[g][c] = _mm512_fmadd_ps(wv, v[c], a[g][c]);
    }
  }
  for (int g = 0; g < G; ++g)
    for (int c = 0; c < NI; ++c) _mm512_storeu_ps(acc + (hq + g) * r.dim + (i + c) * kLanes, a[g][c]);
}

template <int NI, typename C>
inline void accumulate_values(const ValueRows<C>& r, int64_t h, int64_t i, int64_t hq, int64_t gn,
                              const float* scores, float* acc) {
  switch (gn) {
    case 1: accumulate_values_n<1, NI>(r, h, i, hq, scores, acc); break;
    case 2: accumulate_values_n<2, NI>(r, h, i, hq, scores, acc); break;
    case 3: accumulate_values_n<3, NI>(r, h, i, hq, scores, acc); break;
    default: accumulate_values_n<4, NI>(r, h, i, hq, scores, acc); break;
  }
}

// The `group` query heads of KV head h: qf [group, dim] fp32 (already times the softmax scale),
// scores [group * len] and acc [group * dim] fp32 scratch; out[g * dim + d] gets head g's output.
// T: the output; C: the cache (T, fp8 or int8, widened by load16). With int8, ks / vs are the
// [slots, KV heads] fp32 row scales, applied to a score and a weight as decode_attention.cpp does
// (q . (s k) = s (q . k), p (s v) = (p s) v), else nullptr.
template <typename T, typename C>
inline void attend_kv_head(const float* qf, int64_t group, int64_t dim, const C* k_cache, const C* v_cache,
                           const PagedSeq& seq, int64_t h, float* scores, float* acc, T* out,
                           const float* ks = nullptr, const float* vs = nullptr) {
  constexpr bool kScaled = std::is_same_v<C, int8_t>;
  const int64_t n = seq.len, vecs = dim / kLanes, kv_heads = seq.slot_stride / dim;
  float key[kMaxDim];  // the position's key widened to fp32 once, not once per query head
  for (int64_t j = 0; j < n; ++j) {
    const C* k = seq.slot(k_cache, j) + h * dim;
    for (int64_t i = 0; i < vecs; ++i) _mm512_storeu_ps(key + i * kLanes, load16(k + i * kLanes));
    for (int64_t g = 0; g < group; ++g) {
      __m512 s = _mm512_setzero_ps();
      for (int64_t i = 0; i < vecs; ++i)
        s = _mm512_fmadd_ps(_mm512_loadu_ps(qf + g * dim + i * kLanes), _mm512_loadu_ps(key + i * kLanes), s);
      if constexpr (kScaled) {
        scores[g * n + j] = _mm512_reduce_add_ps(s) * ks[seq.slot_index(j) * kv_heads + h];
      } else {
        scores[g * n + j] = _mm512_reduce_add_ps(s);
      }
    }
  }
  float inv_sum[64];  // group <= 64 (checked where the shapes are known)
  for (int64_t g = 0; g < group; ++g) inv_sum[g] = 1.f / exp_row(scores + g * n, n);
  // The value sums in registers, as decode_attention.cpp does; scores and acc are indexed by the
  // group's heads from 0 (hq = g).
  const ValueRows<C> rows{v_cache, seq.table, seq.block_size, seq.slot_stride, kv_heads, dim, n, vs};
  const int64_t chunk = vecs % 4 == 0 ? 4 : 1;
  for (int64_t i = 0; i < vecs; i += chunk)
    for (int64_t g = 0; g < group; g += 4) {
      const int64_t gn = std::min<int64_t>(4, group - g);
      if (chunk == 4) accumulate_values<4>(rows, h, i, g, gn, scores, acc);
      else accumulate_values<1>(rows, h, i, g, gn, scores, acc);
    }
  for (int64_t g = 0; g < group; ++g)
    for (int64_t d = 0; d < dim; ++d) out[g * dim + d] = static_cast<T>(acc[g * dim + d] * inv_sum[g]);
}

// All heads of one sequence (decode_attention.cpp's per-sequence task; the fused step's per-row
// task at wide batches): each cached position's K row of every KV head is one contiguous read,
// widened to fp32 once. qf [heads, dim] fp32 (times the softmax scale); scratch scores
// [heads * len], acc [heads * dim], krow [kv_heads * dim], inv_sum [heads]; out [heads, dim].
// Per head, the same FMAs in the same order as attend_kv_head: the two agree bit for bit.
template <typename T, typename C>
inline void attend_seq(const float* qf, int64_t heads, int64_t kv_heads, int64_t dim, const C* k_cache,
                       const C* v_cache, const PagedSeq& seq, float* scores, float* acc, float* krow, float* inv_sum,
                       T* out, const float* ks = nullptr, const float* vs = nullptr) {
  constexpr bool kScaled = std::is_same_v<C, int8_t>;
  const int64_t n = seq.len, vecs = dim / kLanes, group = heads / kv_heads;
  for (int64_t j = 0; j < n; ++j) {
    const int64_t slot_index = seq.slot_index(j);
    const C* slot = k_cache + slot_index * seq.slot_stride;
    // The slot's keys widened to fp32 once, not once per query head of the group (the
    // widening, not the FMAs, dominated this loop: 3 of 4 conversions were repeats at GQA 3).
    for (int64_t i = 0; i < kv_heads * vecs; ++i) _mm512_storeu_ps(krow + i * kLanes, load16(slot + i * kLanes));
    for (int64_t h = 0; h < kv_heads; ++h) {
      for (int64_t g = 0; g < group; ++g) {
        const int64_t hq = h * group + g;
        const float* qg = qf + hq * dim;
        const float* key = krow + h * dim;
        __m512 s = _mm512_setzero_ps();
        for (int64_t i = 0; i < vecs; ++i)
          s = _mm512_fmadd_ps(_mm512_loadu_ps(qg + i * kLanes), _mm512_loadu_ps(key + i * kLanes), s);
        if constexpr (kScaled) {
          scores[hq * n + j] = _mm512_reduce_add_ps(s) * ks[slot_index * kv_heads + h];
        } else {
          scores[hq * n + j] = _mm512_reduce_add_ps(s);
        }
      }
    }
  }
  for (int64_t hq = 0; hq < heads; ++hq) inv_sum[hq] = 1.f / exp_row(scores + hq * n, n);
  const ValueRows<C> rows{v_cache, seq.table, seq.block_size, seq.slot_stride, kv_heads, dim, n, vs};
  const int64_t chunk = vecs % 4 == 0 ? 4 : 1;
  for (int64_t h = 0; h < kv_heads; ++h)
    for (int64_t i = 0; i < vecs; i += chunk)
      for (int64_t g = 0; g < group; g += 4) {
        const int64_t hq = h * group + g;
        const int64_t gn = std::min<int64_t>(4, group - g);
        if (chunk == 4) accumulate_values<4>(rows, h, i, hq, gn, scores, acc);
        else accumulate_values<1>(rows, h, i, hq, gn, scores, acc);
      }
  for (int64_t hq = 0; hq < heads; ++hq)
    for (int64_t d = 0; d < dim; ++d) out[hq * dim + d] = static_cast<T>(acc[hq * dim + d] * inv_sum[hq]);
}

}  // namespace blink::attn
