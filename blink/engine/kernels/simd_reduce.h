// Sixteen horizontal sums in one vector, shared by the int8 GEMV (int8_matmul.h) and the decode
// attention scores (decode_attention.h): one definition of the shuffle tree, so both add alike.
#pragma once

#include <immintrin.h>

namespace blink::simd {

// 16 accumulators a[r * 4 + m] -> one vector whose lane 4m + r is the sum of a[r * 4 + m]'s 16
// lanes: a shuffle-and-add tree, 45 instructions against ~8 per vector for 16 separate reductions.
inline __m512 reduce16(const __m512* a) {
  __m512 c[8], d[4], e[2];
  for (int i = 0; i < 8; ++i)
    c[i] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], 0x44),
                         _mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], 0xEE));
  for (int j = 0; j < 4; ++j)
    d[j] = _mm512_add_ps(_mm512_shuffle_f32x4(c[2 * j], c[2 * j + 1], 0x88),
                         _mm512_shuffle_f32x4(c[2 * j], c[2 * j + 1], 0xDD));
  for (int t = 0; t < 2; ++t)
    e[t] = _mm512_add_ps(_mm512_shuffle_ps(d[2 * t], d[2 * t + 1], 0x44),
                         _mm512_shuffle_ps(d[2 * t], d[2 * t + 1], 0xEE));
  return _mm512_add_ps(_mm512_shuffle_ps(e[0], e[1], 0x88), _mm512_shuffle_ps(e[0], e[1], 0xDD));
}

}  // namespace blink::simd
