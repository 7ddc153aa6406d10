// Weight-only int8 GEMV/GEMM for 1-3 activation rows (batch-1..3 decode) on AVX-512 CPUs.
//
// Why our own: aten's _weight_int8pack_mm streams only 5.8 GB/s on 1 thread and 9.5 GB/s on
// 2 threads here (SmolLM2's 210 linears per step, cold weights; llama.cpp Q8_0 reaches ~16 GB/s
// for its whole step), and decode at batch 1 is bound by how fast the int8 weights stream.
//
// Semantics are _weight_int8pack_mm's: y[m, n] = (sum_k x[m, k] * w[n, k]) * scale[n] with fp32
// accumulation, x bf16 or fp32, w int8 [N, K] row-major, scale [N] (bf16 or fp32), y in x's dtype.
// x is converted once per call into an fp32 buffer; each 64 int8 weights of a row are widened to
// fp32 (shifts + vcvtdq2ps) and FMA'd into one accumulator per (activation row, weight row).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>
#include <torch/library.h>

#include <immintrin.h>

#include <algorithm>
#include <vector>

namespace {

constexpr int64_t kChunk = 64;  // int8 weights per row per step: one 512-bit load, one cache line
constexpr int64_t kMaxRows = 3;  // activation rows served (the compiled graph's decode batches < 4)
// Software prefetch distance in bytes ahead of the block being read, measured cold (SmolLM2's
// 210 decode linears, M = 1; aten 6.7 / 11.1 GB/s at 1 / 2 threads): 1 / 2 KiB 7.7 / 9.1 GB/s
// (1 thread, loaded); 4 KiB 13.3 / 19.4; 8 KiB 14.0 / 20.0; 16 KiB 13.7 / 18.3 (side by side).
constexpr int64_t kPrefetchBytes = 8192;

template <typename S>
inline float scale_at(const S* s, int64_t n) { return static_cast<float>(s[n]); }

// Where x[k] sits in the fp32 activation buffer. A 64-byte weight load is widened with shifts
// (byte b of each dword lane j, i.e. k = 4j + b, goes to vector b) instead of vpmovsxbd: cheaper
// than the cross-lane widen and one load per cache line (cold, 1 thread: 10.2 vs 8.9 GB/s with the
// same prefetching). So within each full 64-chunk x is stored de-interleaved to match: lane j of
// vector b holds x[4j + b]. The tail (< 64) stays in order and is summed in scalar code.
inline int64_t x_slot(int64_t k, int64_t K) {
  if (k >= K / kChunk * kChunk) return k;
  const int64_t r = k % kChunk;
  return k - r + 16 * (r % 4) + r / 4;
}

// R weight rows [n0, n0 + R) against M activation rows; xf holds M rows of K fp32 (x_slot order).
// The R rows are one contiguous block of R * K bytes, read front to back with a prefetch per
// cache line kPrefetchBytes ahead, which the hardware prefetcher alone did not sustain
// (cold: 5.8 -> 8.9 GB/s for the vpmovsxbd loop when added).
template <int M, int R, typename T, typename S>
inline void rows_block(const float* xf, int64_t K, const int8_t* w, const S* scale, T* y, int64_t N,
                       int64_t n0) {
  __m512 acc[M][R];
  for (int m = 0; m < M; ++m)
    for (int r = 0; r < R; ++r) acc[m][r] = _mm512_setzero_ps();
  const int8_t* wr[R];
  for (int r = 0; r < R; ++r) wr[r] = w + (n0 + r) * K;
  const char* pf = reinterpret_cast<const char*>(w + n0 * K) + kPrefetchBytes;
  const int64_t kfull = K / kChunk * kChunk;
  int64_t k = 0;
  for (; k < kfull; k += kChunk) {
    __m512 xv[M][4];
    for (int m = 0; m < M; ++m)
      for (int b = 0; b < 4; ++b) xv[m][b] = _mm512_loadu_ps(xf + m * K + k + 16 * b);
    for (int r = 0; r < R; ++r) {
      _mm_prefetch(pf + k * R + kChunk * r, _MM_HINT_T0);
      const __m512i v = _mm512_loadu_si512(wr[r] + k);
      const __m512 w0 = _mm512_cvtepi32_ps(_mm512_srai_epi32(_mm512_slli_epi32(v, 24), 24));
      const __m512 w1 = _mm512_cvtepi32_ps(_mm512_srai_epi32(_mm512_slli_epi32(v, 16), 24));
      const __m512 w2 = _mm512_cvtepi32_ps(_mm512_srai_epi32(_mm512_slli_epi32(v, 8), 24));
      const __m512 w3 = _mm512_cvtepi32_ps(_mm512_srai_epi32(v, 24));
      for (int m = 0; m < M; ++m) {
        acc[m][r] = _mm512_fmadd_ps(xv[m][0], w0, acc[m][r]);
        acc[m][r] = _mm512_fmadd_ps(xv[m][1], w1, acc[m][r]);
        acc[m][r] = _mm512_fmadd_ps(xv[m][2], w2, acc[m][r]);
        acc[m][r] = _mm512_fmadd_ps(xv[m][3], w3, acc[m][r]);
      }
    }
  }
  float tail[M][R] = {};
  for (; k < K; ++k)
    for (int m = 0; m < M; ++m)
      for (int r = 0; r < R; ++r) tail[m][r] += xf[m * K + k] * static_cast<float>(wr[r][k]);
  for (int m = 0; m < M; ++m)
    for (int r = 0; r < R; ++r)
      y[m * N + n0 + r] =
          static_cast<T>((_mm512_reduce_add_ps(acc[m][r]) + tail[m][r]) * scale_at(scale, n0 + r));
}

// 8 weight rows per block at M = 1 (8 independent FMA chains cover the FMA latency); 4 at
// M = 2-3 (8-12 accumulators already in flight).
template <int M, typename T, typename S>
void gemv(const float* xf, int64_t K, const int8_t* w, const S* scale, T* y, int64_t N) {
  constexpr int R = M == 1 ? 8 : 4;
  const int64_t blocks = N / R;
  // Each task streams at least ~64 KiB of weights: smaller chunks cost more in fork/join than
  // the second thread saves (the OpenMP region is ~2-5 us here).
  const int64_t grain = std::max<int64_t>(1, (64 * 1024) / std::max<int64_t>(1, R * K));
  at::parallel_for(0, blocks, grain, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) rows_block<M, R>(xf, K, w, scale, y, N, b * R);
  });
  for (int64_t n = blocks * R; n < N; ++n) rows_block<M, 1>(xf, K, w, scale, y, N, n);
}

template <typename T, typename S>
void dispatch_rows(int64_t M, const float* xf, int64_t K, const int8_t* w,
                   const S* scale, T* y, int64_t N) {
  if (M == 1) gemv<1>(xf, K, w, scale, y, N);
  else if (M == 2) gemv<2>(xf, K, w, scale, y, N);
  else gemv<3>(xf, K, w, scale, y, N);
}

at::Tensor int8_gemv(const at::Tensor& x, const at::Tensor& w, const at::Tensor& scales) {
  TORCH_CHECK(x.dim() == 2 && w.dim() == 2 && scales.dim() == 1, "int8_gemv: x [M, K], w [N, K], scales [N]");
  TORCH_CHECK(w.scalar_type() == at::kChar, "int8_gemv: w must be int8");
  TORCH_CHECK(x.scalar_type() == at::kBFloat16 || x.scalar_type() == at::kFloat, "int8_gemv: x must be bf16 or fp32");
  TORCH_CHECK(scales.scalar_type() == at::kBFloat16 || scales.scalar_type() == at::kFloat, "int8_gemv: scales must be bf16 or fp32");
  const int64_t M = x.size(0), K = x.size(1), N = w.size(0);
  TORCH_CHECK(w.size(1) == K && scales.size(0) == N, "int8_gemv: shape mismatch");
  TORCH_CHECK(M >= 1 && M <= kMaxRows, "int8_gemv: 1 to 3 rows");
  auto wc = w.contiguous();
  auto sc = scales.contiguous();
  std::vector<float> xf(static_cast<size_t>(M * K));
  auto xc = x.contiguous();
  if (x.scalar_type() == at::kFloat) {
    const float* p = xc.data_ptr<float>();
    for (int64_t m = 0; m < M; ++m)
      for (int64_t k = 0; k < K; ++k) xf[m * K + x_slot(k, K)] = p[m * K + k];
  } else {
    const c10::BFloat16* p = xc.data_ptr<c10::BFloat16>();
    for (int64_t m = 0; m < M; ++m)
      for (int64_t k = 0; k < K; ++k) xf[m * K + x_slot(k, K)] = static_cast<float>(p[m * K + k]);
  }
  auto y = at::empty({M, N}, x.options());
  const int8_t* wp = wc.data_ptr<int8_t>();
  if (x.scalar_type() == at::kFloat) {
    if (sc.scalar_type() == at::kFloat)
      dispatch_rows(M, xf.data(), K, wp, sc.data_ptr<float>(), y.data_ptr<float>(), N);
    else
      dispatch_rows(M, xf.data(), K, wp, sc.data_ptr<c10::BFloat16>(), y.data_ptr<float>(), N);
  } else {
    if (sc.scalar_type() == at::kFloat)
      dispatch_rows(M, xf.data(), K, wp, sc.data_ptr<float>(), y.data_ptr<c10::BFloat16>(), N);
    else
      dispatch_rows(M, xf.data(), K, wp, sc.data_ptr<c10::BFloat16>(), y.data_ptr<c10::BFloat16>(), N);
  }
  return y;
}

}  // namespace

// FRAGMENT: the blink namespace is shared with the attention kernels and paged_decode_op.py.
TORCH_LIBRARY_FRAGMENT(blink, m) { m.def("int8_gemv(Tensor x, Tensor w, Tensor scales) -> Tensor"); }
TORCH_LIBRARY_IMPL(blink, CPU, m) { m.impl("int8_gemv", &int8_gemv); }
