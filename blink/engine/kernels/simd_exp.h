// exp(x) on 16 fp32 lanes for the attention kernels' softmaxes (decode_attention.cpp,
// prefill_attention.cpp): one definition, so both round alike.
#pragma once

#include <immintrin.h>

// exp(x) for x <= 0 (scores minus their row max): 2^n * p(r) with x = n ln2 + r, |r| <= ln2/2,
// p the degree-7 Taylor polynomial (truncation error < 1.2e-7 relative, about fp32's rounding).
// Below kExpFlushBelow the result is 0, never a subnormal: on Intel cores every vector op that
// makes or reads a subnormal takes a microcode assist, and a random or long-context row can have
// most of its scores that far below the max, which made these kernels several times slower on an
// Intel Xeon than on an AMD EPYC (AMD takes no such assists). A softmax sum is >= 1 (its max term
// is exp(0)), so terms under FLT_MIN cannot change it or a weighted sum in fp32.
constexpr float kExpFlushBelow = -87.0f;  // exp(-87) = 1.6e-38 > FLT_MIN = 1.2e-38, after rounding
inline __m512 exp16(__m512 x) {
  const __mmask16 normal = _mm512_cmp_ps_mask(x, _mm512_set1_ps(kExpFlushBelow), _CMP_GE_OQ);
  x = _mm512_max_ps(x, _mm512_set1_ps(kExpFlushBelow));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);  // ln2 split hi + lo
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187045e-06f), r);
  __m512 p = _mm512_set1_ps(1.f / 5040.f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f / 720.f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f / 120.f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f / 24.f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f / 6.f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f));
  return _mm512_maskz_mov_ps(normal, _mm512_scalef_ps(p, n));
}
