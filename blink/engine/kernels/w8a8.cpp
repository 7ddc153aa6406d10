// The two element-wise passes around torch._int_mm that make a W8A8 (int8 activations, int8
// weights) linear pay on this CPU: quantize_rows turns bf16/fp32 activation rows into int8 with one
// symmetric scale per row, dequant_rows turns the int32 accumulator into the layer's output with
// both scales and the bias applied. Done with eager aten ops these two cost as much as the int8
// GEMM saves over the bf16 one (see w8a8.py); here each is one pass over its tensor, split over
// torch's threads by rows.
//
// Exactness contract (the tests check it bit for bit):
//   quantize_rows: with u = x, or u = x * col_scale (fp32, per column) when a column scale is given
//     (the SmoothQuant factors of linear_int8.py), scale[m] = max(absmax(u[m]), tiny) / 127 (fp32),
//     q = round-half-even(u * (127 / max(absmax, tiny))) saturated to [-127, 127];
//     |q * scale - u| <= scale / 2 up to fp32 rounding. With `offset` the same codes come out as
//     uint8 q + 128 (oneDNN's fast int8 matmul wants unsigned activations; zero point 128).
//   dequant_rows: y = out_dtype((float(acc) * w_scale[n]) * x_scale[m] + float(bias[n])), each
//     operation rounded in fp32 in that order (built with -ffp-contract=off, so no FMA contraction),
//     bf16 output rounded to nearest even like torch's vectorised cast (bf16_simd.h). acc is int32,
//     or fp32 already holding float(acc): oneDNN's int8 matmul with unit scales converts its int32
//     sums with the same round-to-nearest-even, so both give the same bits.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>
#include <immintrin.h>
#include <torch/library.h>

#include "bf16_simd.h"

#include <algorithm>
#include <cstdint>
#include <tuple>

namespace {

// Elements each task touches at least: an OpenMP region costs ~2-5 us here, about what one core
// spends on ~16K elements of either pass, so smaller tasks would cost more than they save.
constexpr int64_t kMinTaskElements = 16 * 1024;
// Symmetric int8 range, as linear_int8.py's weights (-128 is never produced).
constexpr float kInt8Max = 127.0f;
// An all-zero row gets this absmax so its scale is positive and its codes are zero.
constexpr float kTinyAbsmax = 1e-30f;

int64_t grain_rows(int64_t row_elements) {
  return std::max<int64_t>(1, kMinTaskElements / std::max<int64_t>(1, row_elements));
}

// 16 floats from 16 elements of T (bf16 widened exactly; fp32 as is), masked past the end.
inline __m512 load16(const c10::BFloat16* p, __mmask16 mask) { return blink::simd::load_bf16(p, mask); }
inline __m512 load16(const float* p, __mmask16 mask) { return _mm512_maskz_loadu_ps(mask, p); }

using blink::simd::lanes;

// 16 elements of the row, times their column scales when there are any (one rounding in fp32).
template <typename T>
inline __m512 load_scaled(const T* x, const float* col, int64_t k, __mmask16 mask) {
  const __m512 v = load16(x + k, mask);
  return col == nullptr ? v : _mm512_mul_ps(v, _mm512_maskz_loadu_ps(mask, col + k));
}

template <typename T>
void quantize_row(const T* x, const float* col, int64_t K, int8_t* q, float* scale, bool offset) {
  __m512 vmax = _mm512_setzero_ps();
  for (int64_t k = 0; k < K; k += 16) {
    vmax = _mm512_max_ps(vmax, _mm512_abs_ps(load_scaled(x, col, k, lanes(k, K))));
  }
  const float absmax = std::max(_mm512_reduce_max_ps(vmax), kTinyAbsmax);
  *scale = absmax / kInt8Max;
  const __m512 inv = _mm512_set1_ps(kInt8Max / absmax);
  const __m512 lo = _mm512_set1_ps(-kInt8Max), hi = _mm512_set1_ps(kInt8Max);
  for (int64_t k = 0; k < K; k += 16) {
    const __mmask16 mask = lanes(k, K);
    // x * inv can round a hair past +-127 (absmax * (127 / absmax)); clamp before converting.
    const __m512 v = _mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(load_scaled(x, col, k, mask), inv), lo), hi);
    const __m512i i = _mm512_cvt_roundps_epi32(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m128i codes = _mm512_cvtsepi32_epi8(i);
    // q + 128 as uint8 is q's bits with the top one flipped.
    if (offset) codes = _mm_xor_si128(codes, _mm_set1_epi8(static_cast<char>(0x80)));
    _mm_mask_storeu_epi8(q + k, mask, codes);
  }
}

std::tuple<at::Tensor, at::Tensor> quantize_rows(const at::Tensor& x, const std::optional<at::Tensor>& col_scale,
                                                 bool offset) {
  TORCH_CHECK(x.dim() == 2, "quantize_rows: x must be [M, K]");
  TORCH_CHECK(x.scalar_type() == at::kBFloat16 || x.scalar_type() == at::kFloat, "quantize_rows: x must be bf16 or fp32");
  const auto xc = x.contiguous();
  const int64_t M = xc.size(0), K = xc.size(1);
  const bool has_col = col_scale.has_value() && col_scale->defined();
  if (has_col) {
    TORCH_CHECK(col_scale->dim() == 1 && col_scale->size(0) == K && col_scale->scalar_type() == at::kFloat,
                "quantize_rows: col_scale must be fp32 [K]");
  }
  const auto cc = has_col ? col_scale->contiguous() : at::Tensor();
  const float* cp = has_col ? cc.data_ptr<float>() : nullptr;
  auto q = at::empty({M, K}, xc.options().dtype(offset ? at::kByte : at::kChar));
  auto scales = at::empty({M}, xc.options().dtype(at::kFloat));
  int8_t* qp = static_cast<int8_t*>(q.data_ptr());
  float* sp = scales.data_ptr<float>();
  const bool bf16 = xc.scalar_type() == at::kBFloat16;
  const void* xp = xc.data_ptr();
  at::parallel_for(0, M, grain_rows(K), [&](int64_t m0, int64_t m1) {
    for (int64_t m = m0; m < m1; ++m) {
      if (bf16) {
        quantize_row(static_cast<const c10::BFloat16*>(xp) + m * K, cp, K, qp + m * K, sp + m, offset);
      } else {
        quantize_row(static_cast<const float*>(xp) + m * K, cp, K, qp + m * K, sp + m, offset);
      }
    }
  });
  return {q, scales};
}

// 16 accumulators as fp32: int32 converted (round to nearest even), fp32 as is.
inline __m512 load_acc(const int32_t* p, __mmask16 mask) { return _mm512_cvtepi32_ps(_mm512_maskz_loadu_epi32(mask, p)); }
inline __m512 load_acc(const float* p, __mmask16 mask) { return _mm512_maskz_loadu_ps(mask, p); }

template <typename A, typename B>
void dequant_row(const A* acc, int64_t N, float x_scale, const float* w_scales, const B* bias, void* y,
                 bool float_output) {
  const __m512 xs = _mm512_set1_ps(x_scale);
  for (int64_t n = 0; n < N; n += 16) {
    const __mmask16 mask = lanes(n, N);
    __m512 v = load_acc(acc + n, mask);
    v = _mm512_mul_ps(_mm512_mul_ps(v, _mm512_maskz_loadu_ps(mask, w_scales + n)), xs);
    if (bias != nullptr) v = _mm512_add_ps(v, load16(bias + n, mask));
    if (float_output) {
      _mm512_mask_storeu_ps(static_cast<float*>(y) + n, mask, v);
    } else {
      blink::simd::store_bf16(static_cast<c10::BFloat16*>(y) + n, v, mask);
    }
  }
}

template <typename A>
void dequant_acc_row(const A* acc, int64_t N, float x_scale, const float* w_scales, const void* bias, bool bias_bf16,
                     void* y, bool float_output) {
  if (bias_bf16) {
    dequant_row(acc, N, x_scale, w_scales, static_cast<const c10::BFloat16*>(bias), y, float_output);
  } else {
    dequant_row(acc, N, x_scale, w_scales, static_cast<const float*>(bias), y, float_output);
  }
}

at::Tensor dequant_rows(const at::Tensor& acc, const at::Tensor& x_scales, const at::Tensor& w_scales,
                        const std::optional<at::Tensor>& bias, bool float_output) {
  TORCH_CHECK(acc.dim() == 2 && (acc.scalar_type() == at::kInt || acc.scalar_type() == at::kFloat),
              "dequant_rows: acc must be int32 or fp32 [M, N]");
  const int64_t M = acc.size(0), N = acc.size(1);
  TORCH_CHECK(x_scales.dim() == 1 && x_scales.size(0) == M && x_scales.scalar_type() == at::kFloat,
              "dequant_rows: x_scales must be fp32 [M]");
  TORCH_CHECK(w_scales.dim() == 1 && w_scales.size(0) == N && w_scales.scalar_type() == at::kFloat,
              "dequant_rows: w_scales must be fp32 [N]");
  const bool has_bias = bias.has_value() && bias->defined();
  if (has_bias) {
    TORCH_CHECK(bias->dim() == 1 && bias->size(0) == N, "dequant_rows: bias must be [N]");
    TORCH_CHECK(bias->scalar_type() == at::kFloat || bias->scalar_type() == at::kBFloat16,
                "dequant_rows: bias must be fp32 or bf16");
  }
  const auto ac = acc.contiguous();
  const auto xs = x_scales.contiguous();
  const auto ws = w_scales.contiguous();
  const auto bc = has_bias ? bias->contiguous() : at::Tensor();
  auto y = at::empty({M, N}, ac.options().dtype(float_output ? at::kFloat : at::kBFloat16));
  const bool acc_float = ac.scalar_type() == at::kFloat;
  const void* ap = ac.data_ptr();
  const float* xsp = xs.data_ptr<float>();
  const float* wsp = ws.data_ptr<float>();
  const size_t out_size = float_output ? sizeof(float) : sizeof(c10::BFloat16);
  auto* yp = static_cast<char*>(y.data_ptr());
  const bool bias_bf16 = has_bias && bc.scalar_type() == at::kBFloat16;
  const void* bp = has_bias ? bc.data_ptr() : nullptr;
  at::parallel_for(0, M, grain_rows(N), [&](int64_t m0, int64_t m1) {
    for (int64_t m = m0; m < m1; ++m) {
      void* row = yp + m * N * out_size;
      if (acc_float) {
        dequant_acc_row(static_cast<const float*>(ap) + m * N, N, xsp[m], wsp, bp, bias_bf16, row, float_output);
      } else {
        dequant_acc_row(static_cast<const int32_t*>(ap) + m * N, N, xsp[m], wsp, bp, bias_bf16, row, float_output);
      }
    }
  });
  return y;
}

}  // namespace

// FRAGMENT: the blink namespace is shared with the other kernel libraries.
TORCH_LIBRARY_FRAGMENT(blink, m) {
  m.def("quantize_rows(Tensor x, Tensor? col_scale=None, bool offset=False) -> (Tensor, Tensor)");
  m.def("dequant_rows(Tensor acc, Tensor x_scales, Tensor w_scales, Tensor? bias, bool float_output) -> Tensor");
}
TORCH_LIBRARY_IMPL(blink, CPU, m) {
  m.impl("quantize_rows", &quantize_rows);
  m.impl("dequant_rows", &dequant_rows);
}
