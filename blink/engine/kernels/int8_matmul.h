// Weight-only int8 matmul for 1 to kMaxRows bf16 activation rows on AVX-512 CPUs: the one kernel
// behind blink::int8_gemv (int8_gemv.cpp) and the fused decode step. Header-only, no threading:
// the caller splits the output rows [0, N) across its own threads and calls rows() per range.
//
// Semantics are aten's _weight_int8pack_mm: y[m, n] = bf16((sum_k x[m, k] * w[n, k]) * scale[n])
// with fp32 accumulation, x bf16 [M, K], w int8 [N, K] row-major, scale bf16 [N]. Only the fp32
// summation order differs (and, on the bf16 path, bf16 denormals, |v| < 1.2e-38, count as zero in
// x and in y: vdpbf16ps and vcvtneps2bf16 ignore MXCSR and flush them).
//
// Batch invariance: on CPUs with AVX512-BF16 every row count runs the bf16 path, whose row m sums
// its products in one fixed order (lane i of vector v: the pair 32v + 2i, 2i + 1, then the lanes'
// halving tree) whatever M is, so a row's output is bit-identical at 1 and at 64 rows. That makes
// a speculative verification (1 + K rows) round exactly as K + 1 one-row decode steps. The fp32
// loop (kept for CPUs without it) summed in another order: 1 in ~2,000 outputs (K = 576) differed
// by a bf16 ulp from the same row at 8 rows; at 1-3 rows the two paths cost the same (SmolLM2's
// 121 linears, cold, 2 threads, loaded machine: bf16 / fp32 time 0.97, 1.02, 1.01 at M = 1, 2, 3).
//
// Why our own: aten's kernel streams only 5.8 GB/s on 1 thread and 9.5 GB/s on 2 here (SmolLM2's
// 210 linears per step, cold weights); decode at 1-3 rows is bound by how fast the int8 weights
// stream, and the fp32 loop below reaches the machine's ~27 GB/s on 2 threads (the bf16 path as
// fast, above). From 4 rows on the matmul is compute-bound and the bf16 dot-product path is what
// makes it fast (~80-95 GMAC/s per core here, of vdpbf16ps's ~110 peak; aten's int8 kernel is
// 2.4-3x slower per SmolLM2 step at 4-64 rows).
//
// Callers splitting rows across threads: ranges that start at multiples of 8 (kBlockRows) keep
// ragged blocks to the ends. Each thread's bf16 path keeps a thread_local buffer of 8 * K * 2 bytes.
#pragma once

#include <c10/util/BFloat16.h>

#include <immintrin.h>

#include "simd_reduce.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

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


// ---- bf16 dot products (vdpbf16ps): every row count on AVX512-BF16 CPUs ----
// At 16 rows the matmul does 16 MACs per weight byte: widening int8 -> fp32 and FMAing 16 lanes
// per instruction is compute-bound, while vdpbf16ps does 32 MACs per instruction. int8 weights are
// exact in bf16 and the activations are bf16 already, so each product is exact in fp32 and the
// result is the fp32 path's up to summation order. Each block of kBlockRows weight rows is widened
// once into a bf16 buffer in L1 and then reused by every activation row.
#define BLINK_INT8MM_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))

// Weight rows widened per block: 8 x 1536 (SmolLM2's down projection) x 2 bytes = 24 KiB, within
// the 32 KiB L1 data cache.
constexpr int64_t kBlockRows = 8;
// Register block of the dot-product loop: 4 activation rows x 4 weight rows = 16 fp32
// accumulators + 4 weight + 1 activation vectors of the 32 zmm registers; 16 accumulators are
// also what one batched horizontal reduction (reduce16) folds into a single vector.
constexpr int kMb = 4;
constexpr int kRb = 4;

// One 64-byte-aligned vector of storage (a std::vector of __m512i would drop its alignment).
struct alignas(64) CacheLine {
  char bytes[64];
};

// bf16 vectors (32 values) per row: K rounded up to 32, zero-padded.
inline int64_t bf16_vectors(int64_t K) { return (K + 31) / 32; }

inline bool cpu_has_bf16() {
  static const bool has = __builtin_cpu_supports("avx512bf16");
  return has;
}

// 16 int8 weights widened to fp32 (exact); pairs of these become one bf16 vector in order: vector
// v of a row holds w[32v .. 32v + 31], so a pair lane of vdpbf16ps holds w[k], w[k + 1] and the
// activation layout is x itself (zero-padded to a whole vector). vpmovsxbd + vcvtdq2ps here: the
// fp32 path's shift widening saves a load per cache line, which matters only while memory-bound.
BLINK_INT8MM_BF16 inline __m512 widen16(const int8_t* p) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}

using blink::simd::reduce16;  // simd_reduce.h

// MB activation rows x RB weight rows over Kv bf16 vectors; writes y[m * ldy + n + r]. With WIDEN
// the weights come from the int8 rows wq (row stride K) and are widened into wb on the way, so the
// conversions overlap the dot products (the first activation block of each weight block; measured
// 3072 x 576 at M = 16, 1 thread: the separate widening pass took ~100 of 430 us); later blocks
// read wb. The prefetch goes to L2 (T1): into L1 it evicted the activations and wb (cold LM head
// 49152 x 576, 1 thread, alternating: M = 4 2.2-2.5 vs 3.2-4.8 ms, M = 16 5.9-6.1 vs 7.0-11.0).
template <int MB, int RB, bool WIDEN, bool KEEP = true>
BLINK_INT8MM_BF16 inline void dot_block(const __m512i* xs, __m512i* wb, const int8_t* wq, int64_t K,
                                        int64_t Kv, const c10::BFloat16* scale, c10::BFloat16* y,
                                        int64_t ldy, int64_t n) {
  __m512 acc[RB * MB];
  for (int i = 0; i < RB * MB; ++i) acc[i] = _mm512_setzero_ps();
  for (int64_t v = 0; v < Kv; ++v) {
    __m512bh wv[RB];
    if constexpr (WIDEN) {
      for (int r = 0; r < RB; ++r) {
        const int8_t* p = wq + r * K + 32 * v;
        if ((v & 1) == 0) _mm_prefetch(reinterpret_cast<const char*>(p) + kPrefetchBytes, _MM_HINT_T1);
        const __m512 lo = widen16(p);
        const __m512 hi = 32 * v + 16 < K ? widen16(p + 16) : _mm512_setzero_ps();
        wv[r] = _mm512_cvtne2ps_pbh(hi, lo);
        if constexpr (KEEP) _mm512_store_si512(wb + r * Kv + v, (__m512i)wv[r]);
      }
    } else {
      for (int r = 0; r < RB; ++r) wv[r] = (__m512bh)_mm512_load_si512(wb + r * Kv + v);
    }
    for (int m = 0; m < MB; ++m) {
      const __m512bh xv = (__m512bh)_mm512_loadu_si512(xs + m * Kv + v);
      for (int r = 0; r < RB; ++r) acc[r * MB + m] = _mm512_dpbf16_ps(acc[r * MB + m], xv, wv[r]);
    }
  }
  if constexpr (MB == 4 && RB == 4) {
    float s4[4];
    for (int r = 0; r < 4; ++r) s4[r] = static_cast<float>(scale[n + r]);
    const __m512 sums = _mm512_mul_ps(reduce16(acc), _mm512_broadcast_f32x4(_mm_loadu_ps(s4)));
    const __m256i out = (__m256i)_mm512_cvtneps_pbh(sums);
    alignas(32) uint64_t lanes[4];
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), out);
    for (int m = 0; m < 4; ++m) std::memcpy(y + m * ldy + n, &lanes[m], sizeof(uint64_t));
  } else {
    for (int m = 0; m < MB; ++m)
      for (int r = 0; r < RB; ++r)
        y[m * ldy + n + r] = static_cast<c10::BFloat16>(_mm512_reduce_add_ps(acc[r * MB + m]) *
                                                        static_cast<float>(scale[n + r]));
  }
}

// MB activation rows against the nb weight rows of one block (int8 at wq, bf16 in wb).
template <int MB, bool WIDEN, bool KEEP = true>
BLINK_INT8MM_BF16 inline void dot_rows_m(const __m512i* xs, __m512i* wb, const int8_t* wq, int64_t K,
                                         int64_t Kv, int64_t nb, const c10::BFloat16* scale,
                                         c10::BFloat16* y, int64_t ldy, int64_t n) {
  int64_t r = 0;
  for (; r + kRb <= nb; r += kRb)
    dot_block<MB, kRb, WIDEN, KEEP>(xs, wb + r * Kv, wq + r * K, K, Kv, scale, y, ldy, n + r);
  switch (nb - r) {
    case 3: dot_block<MB, 3, WIDEN, KEEP>(xs, wb + r * Kv, wq + r * K, K, Kv, scale, y, ldy, n + r); break;
    case 2: dot_block<MB, 2, WIDEN, KEEP>(xs, wb + r * Kv, wq + r * K, K, Kv, scale, y, ldy, n + r); break;
    case 1: dot_block<MB, 1, WIDEN, KEEP>(xs, wb + r * Kv, wq + r * K, K, Kv, scale, y, ldy, n + r); break;
    default: break;
  }
}

// Weight rows [n0, n1) against all M activation rows (bf16 layout in xs), one widened block of
// kBlockRows rows at a time.
BLINK_INT8MM_BF16 inline void bf16_rows(const __m512i* xs, int64_t M, int64_t K, const int8_t* w,
                                        const c10::BFloat16* scale, c10::BFloat16* y, int64_t ldy,
                                        int64_t n0, int64_t n1) {
  const int64_t Kv = bf16_vectors(K);
  // Per-thread widened block, grown once to the largest K seen (rows() runs on the caller's
  // threads, each with its own buffer).
  thread_local std::vector<CacheLine> buffer;
  if (static_cast<int64_t>(buffer.size()) < kBlockRows * Kv) buffer.resize(kBlockRows * Kv);
  __m512i* wb = reinterpret_cast<__m512i*>(buffer.data());
  for (int64_t n = n0; n < n1; n += kBlockRows) {
    const int64_t nb = std::min(kBlockRows, n1 - n);
    const int8_t* wq = w + n * K;
    if (M < kMb) {  // one activation block: widen on the fly, nothing to keep for a later block
      switch (M) {
        case 1: dot_rows_m<1, true, false>(xs, wb, wq, K, Kv, nb, scale, y, ldy, n); break;
        case 2: dot_rows_m<2, true, false>(xs, wb, wq, K, Kv, nb, scale, y, ldy, n); break;
        default: dot_rows_m<3, true, false>(xs, wb, wq, K, Kv, nb, scale, y, ldy, n); break;
      }
      continue;
    }
    // The first activation block is whole and widens the weights into wb for the others.
    dot_rows_m<kMb, true>(xs, wb, wq, K, Kv, nb, scale, y, ldy, n);
    int64_t m = kMb;
    for (; m + kMb <= M; m += kMb)
      dot_rows_m<kMb, false>(xs + m * Kv, wb, wq, K, Kv, nb, scale, y + m * ldy, ldy, n);
    switch (M - m) {
      case 3: dot_rows_m<3, false>(xs + m * Kv, wb, wq, K, Kv, nb, scale, y + m * ldy, ldy, n); break;
      case 2: dot_rows_m<2, false>(xs + m * Kv, wb, wq, K, Kv, nb, scale, y + m * ldy, ldy, n); break;
      case 1: dot_rows_m<1, false>(xs + m * Kv, wb, wq, K, Kv, nb, scale, y + m * ldy, ldy, n); break;
      default: break;
    }
  }
}

inline void bf16_prepare(const c10::BFloat16* x, int64_t ldx, int64_t M, int64_t K, void* scratch) {
  const int64_t Kp = bf16_vectors(K) * 32;
  auto* xs = static_cast<c10::BFloat16*>(scratch);
  for (int64_t m = 0; m < M; ++m) {
    std::memcpy(xs + m * Kp, x + m * ldx, K * sizeof(c10::BFloat16));
    std::memset(static_cast<void*>(xs + m * Kp + K), 0, (Kp - K) * sizeof(c10::BFloat16));
  }
}

// The bf16 path serves every row count (batch invariance, see the top of this file); at 1-3 rows
// it widens on the fly without keeping the widened block (no later activation block reads it).
constexpr int64_t kBf16MinRows = 1;

inline bool use_bf16(int64_t M) { return M >= kBf16MinRows && cpu_has_bf16(); }

}  // namespace detail

// Bytes of scratch prepare() needs for M activation rows of K (K % 16 == 0; 1 <= M <= kMaxRows).
inline int64_t scratch_bytes(int64_t M, int64_t K) {
  if (detail::use_bf16(M)) return M * detail::bf16_vectors(K) * 64;
  return M * K * static_cast<int64_t>(sizeof(float));
}

// Convert bf16 activations x [M, K] (row stride ldx elements) into the kernel's own layout in
// scratch. Called once per matmul (by one thread, or by each thread redundantly: it is cheap).
inline void prepare(const c10::BFloat16* x, int64_t ldx, int64_t M, int64_t K, void* scratch) {
  if (detail::use_bf16(M)) return detail::bf16_prepare(x, ldx, M, K, scratch);
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
  if (detail::use_bf16(M))
    return detail::bf16_rows(static_cast<const __m512i*>(scratch), M, K, w, scale, y, ldy, n0, n1);
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
