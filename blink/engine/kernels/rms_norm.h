// RMSNorm of bf16 rows as the eager path computes it (layers/norm.py), shared by the fused decode
// step (decode_step.cpp) and the prefill ops (prefill_ops.cpp) so both round alike bit for bit:
// x = bf16(hidden + residual); y = bf16(w * bf16(x * rsqrt(mean(x^2) + eps))) with the mean taken
// in fp32 in aten's summation order (sum_squares). Any row width (a masked tail past the last 16).
#pragma once

#include <c10/util/BFloat16.h>

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace blink::norm {

using bf16 = c10::BFloat16;

// bf16 -> fp32 is the bf16 bits in the high half of an fp32 word (exact); lanes past `mask` read 0.
inline __m512 load_bf16(const bf16* p, __mmask16 mask = 0xFFFF) {
  const __m256i bits = _mm256_maskz_loadu_epi16(mask, p);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16));
}

// fp32 -> bf16 rounded to nearest even, 16 lanes at a time, each bf16 in the low half of a 32-bit
// lane: aten's vectorised conversion (cvtfp32_bf16), which the eager ops use, NaN -> 0xFFFF
// included (c10::BFloat16's scalar cast gives 0x7FC0; both are NaN).
inline __m512i bf16_bits(__m512 f) {
  const __m512i bits = _mm512_castps_si512(f);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
  const __m512i r = _mm512_srli_epi32(_mm512_add_epi32(bits, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7FFF))), 16);
  return _mm512_mask_blend_epi32(_mm512_cmp_ps_mask(f, f, _CMP_UNORD_Q), r, _mm512_set1_epi32(0xFFFF));
}

// static_cast<float>(static_cast<bf16>(f)) on 16 lanes.
inline __m512 round_bf16(__m512 f) { return _mm512_castsi512_ps(_mm512_slli_epi32(bf16_bits(f), 16)); }

// Rounds to bf16 and stores lanes [0, 16) of `mask`.
inline void store_bf16(bf16* p, __m512 f, __mmask16 mask = 0xFFFF) {
  _mm256_mask_storeu_epi16(p, mask, _mm512_cvtepi32_epi16(bf16_bits(f)));
}

// Lanes [i, min(i + 16, n)) of a row.
inline __mmask16 lanes(int64_t i, int64_t n) {
  const int64_t left = std::min<int64_t>(16, n - i);
  return static_cast<__mmask16>((1u << left) - 1u);
}

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
