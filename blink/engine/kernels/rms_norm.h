// RMSNorm of bf16 rows as the eager path computes it (layers/norm.py), shared by the fused decode
// step (decode_step.cpp) and the prefill ops (prefill_ops.cpp) so both round alike bit for bit:
// x = bf16(hidden + residual); y = bf16(w * bf16(x * rsqrt(mean(x^2) + eps))) with the mean taken
// in fp32 in aten's summation order (sum_squares). Any row width (a masked tail past the last 16).
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "bf16_simd.h"

namespace blink::norm {

using simd::bf16;

using simd::lanes;
using simd::load_bf16;
using simd::round_bf16;
using simd::store_bf16;

// sum(x[i]^2) in fp32, added in exactly the order aten's CPU sum kernel uses for a contiguous
// fp32 row (ATen/native/cpu/SumKernel.cpp: vectorized_inner_sum -> row_sum -> multi_row_sum), so
// RMSNorm rounds as F.rms_norm does (it takes mean(x.pow(2)) through that kernel). The sum kernel
// is registered without an AVX-512 build, so it runs its AVX2 one: 8 lanes, 4 interleaved vector
// accumulators, a 4-level cascade of 2^4-step partial sums, then the 8 lanes added one by one.
// Checked against torch.sum on 2,000 random rows of 576 and 300 of 896 (all equal; 16 lanes
// differed in 58%). A plain left-to-right sum flipped ~1 in 8,000 normed bf16 elements, enough
// for greedy tokens to part from eager's on a 30-layer model.
inline float sum_squares(const bf16* x, int64_t n) {
  constexpr int64_t kLanes8 = 8, kIlp = 4, kLevels = 4;
  const int64_t vecs = n / kLanes8, rows = vecs / kIlp;
  auto sq = [&](int64_t v) {
    const __m128i bits = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x + v * kLanes8));
    const __m256 f = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(bits), 16));
    return _mm256_mul_ps(f, f);
  };
  int64_t ceil_log2 = 1;
  if (rows > 2) ceil_log2 = 64 - __builtin_clzll(static_cast<uint64_t>(rows - 1));
  const int64_t level_power = std::max<int64_t>(4, ceil_log2 / kLevels);
  const int64_t level_step = int64_t{1} << level_power, level_mask = level_step - 1;
  __m256 acc[kLevels][kIlp];
  for (auto& level : acc)
    for (auto& a : level) a = _mm256_setzero_ps();
  int64_t i = 0;
  while (i + level_step <= rows) {
    for (int64_t j = 0; j < level_step; ++j, ++i)
      for (int64_t k = 0; k < kIlp; ++k) acc[0][k] = _mm256_add_ps(acc[0][k], sq(i * kIlp + k));
    for (int64_t j = 1; j < kLevels; ++j) {
      for (int64_t k = 0; k < kIlp; ++k) {
        acc[j][k] = _mm256_add_ps(acc[j][k], acc[j - 1][k]);
        acc[j - 1][k] = _mm256_setzero_ps();
      }
      if ((i & (level_mask << (j * level_power))) != 0) break;
    }
  }
  for (; i < rows; ++i)
    for (int64_t k = 0; k < kIlp; ++k) acc[0][k] = _mm256_add_ps(acc[0][k], sq(i * kIlp + k));
  for (int64_t j = 1; j < kLevels; ++j)
    for (int64_t k = 0; k < kIlp; ++k) acc[0][k] = _mm256_add_ps(acc[0][k], acc[j][k]);
  for (int64_t v = rows * kIlp; v < vecs; ++v) acc[0][0] = _mm256_add_ps(acc[0][0], sq(v));
  for (int64_t k = 1; k < kIlp; ++k) acc[0][0] = _mm256_add_ps(acc[0][0], acc[0][k]);
  float total = 0.f;
  for (int64_t k = vecs * kLanes8; k < n; ++k) total += static_cast<float>(x[k]) * static_cast<float>(x[k]);
  alignas(32) float lanes8[kLanes8];
  _mm256_store_ps(lanes8, acc[0][0]);
  for (float lane : lanes8) total += lane;
  return total;
}

// y = bf16(w * bf16(x * rsqrt(mean(x^2) + eps))) over n elements: what RMSNorm.forward does for
// bf16 (F.rms_norm in fp32, cast back, then the bf16 weight multiply). Two multiplies, each
// rounded: no FMA, so the vector lanes give the scalar expression's bits.
inline void rms_norm(const bf16* x, const bf16* w, int64_t n, float eps, bf16* y) {
  const __m512 rstd = _mm512_set1_ps(1.f / std::sqrt(sum_squares(x, n) / static_cast<float>(n) + eps));
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = lanes(i, n);
    const __m512 xn = round_bf16(_mm512_mul_ps(load_bf16(x + i, m), rstd));
    store_bf16(y + i, _mm512_mul_ps(load_bf16(w + i, m), xn), m);
  }
}

// s = bf16(a + b) over n elements (the residual add before a norm).
inline void add(const bf16* a, const bf16* b, int64_t n, bf16* s) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = lanes(i, n);
    store_bf16(s + i, _mm512_add_ps(load_bf16(a + i, m), load_bf16(b + i, m)), m);
  }
}

}  // namespace blink::norm
