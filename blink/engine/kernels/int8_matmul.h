// Weight-only int8 matmul for 1 to kMaxRows bf16 activation rows on AVX-512 CPUs: the one kernel
// behind blink::int8_gemv (int8_gemv.cpp) and the fused decode step. Header-only, no threading:
// the caller splits the output rows [0, N) across its own threads and calls rows() per range.
//
// Semantics are aten's _weight_int8pack_mm: y[m, n] = bf16((sum_k x[m, k] * w[n, k]) * scale[n])
// with fp32 accumulation, x bf16 [M, K], w int8 [N, K] row-major, scale bf16 [N]. Only the fp32
// summation order differs.
//
// Why our own: aten's kernel streams only 5.8 GB/s on 1 thread and 9.5 GB/s on 2 here (SmolLM2's
// 210 linears per step, cold weights); decode at 1-3 rows is bound by how fast the int8 weights
// stream, and this loop reaches the machine's ~27 GB/s on 2 threads.
#pragma once

#include <c10/util/BFloat16.h>

#include <immintrin.h>

#include <algorithm>
#include <cstdint>

namespace blink::int8mm {

constexpr int64_t kMaxRows = 64;  // largest M served (decode batches and small prefill chunks)

namespace detail {

constexpr int64_t kChunk = 64;  // int8 weights per row per step: one 512-bit load, one cache line
constexpr int64_t kGroup = 3;   // activation rows per pass of the fp32 loop (accumulators fit)
// Software prefetch distance in bytes ahead of the block being read, measured cold (SmolLM2's
// 210 decode linears, M = 1; aten 6.7 / 11.1 GB/s at 1 / 2 threads): 1 / 2 KiB 7.7 / 9.1 GB/s
// (1 thread, loaded); 4 KiB 13.3 / 19.4; 8 KiB 14.0 / 20.0; 16 KiB 13.7 / 18.3 (side by side).
constexpr int64_t kPrefetchBytes = 8192;

// Where x[k] sits in the fp32 activation scratch. A 64-byte weight load is widened with shifts
// (byte b of each dword lane j, i.e. k = 4j + b, goes to vector b) instead of vpmovsxbd: cheaper
// than the cross-lane widen and one load per cache line (cold, 1 thread: 10.2 vs 8.9 GB/s with the
// same prefetching). So within each full 64-chunk x is stored de-interleaved to match: lane j of
// vector b holds x[4j + b]. The tail (< 64) stays in order and is summed in scalar code.
inline int64_t x_slot(int64_t k, int64_t K) {
  if (k >= K / kChunk * kChunk) return k;
  const int64_t r = k % kChunk;
  return k - r + 16 * (r % 4) + r / 4;
}

// R weight rows [n0, n0 + R) against G activation rows; xf holds G rows of K fp32 (x_slot order).
// The R rows are one contiguous block of R * K bytes, read front to back with a prefetch per
// cache line kPrefetchBytes ahead, which the hardware prefetcher alone did not sustain
// (cold: 5.8 -> 8.9 GB/s for the vpmovsxbd loop when added).
template <int G, int R>
inline void fp32_block(const float* xf, int64_t K, const int8_t* w, const c10::BFloat16* scale,
                       c10::BFloat16* y, int64_t ldy, int64_t n0) {
  __m512 acc[G][R];
  for (int m = 0; m < G; ++m)
    for (int r = 0; r < R; ++r) acc[m][r] = _mm512_setzero_ps();
  const int8_t* wr[R];
  for (int r = 0; r < R; ++r) wr[r] = w + (n0 + r) * K;
  const char* pf = reinterpret_cast<const char*>(w + n0 * K) + kPrefetchBytes;
  const int64_t kfull = K / kChunk * kChunk;
  int64_t k = 0;
  for (; k < kfull; k += kChunk) {
    __m512 xv[G][4];
    for (int m = 0; m < G; ++m)
      for (int b = 0; b < 4; ++b) xv[m][b] = _mm512_loadu_ps(xf + m * K + k + 16 * b);
    for (int r = 0; r < R; ++r) {
      _mm_prefetch(pf + k * R + kChunk * r, _MM_HINT_T0);
      const __m512i v = _mm512_loadu_si512(wr[r] + k);
      const __m512 w0 = _mm512_cvtepi32_ps(_mm512_srai_epi32(_mm512_slli_epi32(v, 24), 24));
      const __m512 w1 = _mm512_cvtepi32_ps(_mm512_srai_epi32(_mm512_slli_epi32(v, 16), 24));
      const __m512 w2 = _mm512_cvtepi32_ps(_mm512_srai_epi32(_mm512_slli_epi32(v, 8), 24));
      const __m512 w3 = _mm512_cvtepi32_ps(_mm512_srai_epi32(v, 24));
      for (int m = 0; m < G; ++m) {
        acc[m][r] = _mm512_fmadd_ps(xv[m][0], w0, acc[m][r]);
        acc[m][r] = _mm512_fmadd_ps(xv[m][1], w1, acc[m][r]);
        acc[m][r] = _mm512_fmadd_ps(xv[m][2], w2, acc[m][r]);
        acc[m][r] = _mm512_fmadd_ps(xv[m][3], w3, acc[m][r]);
      }
    }
  }
  float tail[G][R] = {};
  for (; k < K; ++k)
    for (int m = 0; m < G; ++m)
      for (int r = 0; r < R; ++r) tail[m][r] += xf[m * K + k] * static_cast<float>(wr[r][k]);
  for (int m = 0; m < G; ++m)
    for (int r = 0; r < R; ++r)
      y[m * ldy + n0 + r] = static_cast<c10::BFloat16>(
          (_mm512_reduce_add_ps(acc[m][r]) + tail[m][r]) * static_cast<float>(scale[n0 + r]));
}

// 8 weight rows per block at G = 1 (8 independent FMA chains cover the FMA latency); 4 at
// G = 2-3 (8-12 accumulators already in flight).
template <int G>
inline void fp32_rows(const float* xf, int64_t K, const int8_t* w, const c10::BFloat16* scale,
                      c10::BFloat16* y, int64_t ldy, int64_t n0, int64_t n1) {
  constexpr int R = G == 1 ? 8 : 4;
  int64_t n = n0;
  for (; n + R <= n1; n += R) fp32_block<G, R>(xf, K, w, scale, y, ldy, n);
  for (; n < n1; ++n) fp32_block<G, 1>(xf, K, w, scale, y, ldy, n);
}

}  // namespace detail

// Bytes of scratch prepare() needs for M activation rows of K (K % 16 == 0; 1 <= M <= kMaxRows).
inline int64_t scratch_bytes(int64_t M, int64_t K) {
  return M * K * static_cast<int64_t>(sizeof(float));
}

// Convert bf16 activations x [M, K] (row stride ldx elements) into the kernel's own layout in
// scratch. Called once per matmul (by one thread, or by each thread redundantly: it is cheap).
inline void prepare(const c10::BFloat16* x, int64_t ldx, int64_t M, int64_t K, void* scratch) {
  float* xf = static_cast<float*>(scratch);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t k = 0; k < K; ++k)
      xf[m * K + detail::x_slot(k, K)] = static_cast<float>(x[m * ldx + k]);
}

// Output rows [n0, n1) of y = x @ (w * scale)^T: y[m * ldy + n] = bf16((sum_k x[m, k] * w[n, k]) *
// scale[n]), fp32 accumulation, w int8 [N, K] row-major (row stride K), scale bf16 [N]. Any
// n0 < n1 <= N (ragged ends handled). Single-threaded.
inline void rows(const void* scratch, int64_t M, int64_t K, const int8_t* w,
                 const c10::BFloat16* scale, c10::BFloat16* y, int64_t ldy, int64_t n0, int64_t n1) {
  const float* xf = static_cast<const float*>(scratch);
  for (int64_t m0 = 0; m0 < M; m0 += detail::kGroup) {
    const int64_t g = std::min<int64_t>(detail::kGroup, M - m0);
    const float* xg = xf + m0 * K;
    c10::BFloat16* yg = y + m0 * ldy;
    if (g == 1) detail::fp32_rows<1>(xg, K, w, scale, yg, ldy, n0, n1);
    else if (g == 2) detail::fp32_rows<2>(xg, K, w, scale, yg, ldy, n0, n1);
    else detail::fp32_rows<3>(xg, K, w, scale, yg, ldy, n0, n1);
  }
}

}  // namespace blink::int8mm
