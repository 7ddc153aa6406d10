// bf16 <-> fp32 on 16 AVX-512 lanes, shared by the kernels that read or write bf16 rows with a
// masked tail (rms_norm.h, prefill_ops.cpp, w8a8.cpp), so they all round as aten's vectorised
// casts do.
#pragma once

#include <c10/util/BFloat16.h>

#include <immintrin.h>

#include <algorithm>
#include <cstdint>

namespace blink::simd {

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

}  // namespace blink::simd
