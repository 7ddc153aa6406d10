// Fused elementwise ops for the eager bf16 forward (prefill above all), each one pass over its rows
// split across torch's threads, where aten takes several passes and an fp32 copy:
//   blink::rms_norm(x, w, eps)          RMSNorm.forward(x) in bf16 (rms_norm.h, shared with the
//   blink::add_rms_norm(x, r, w, eps)   fused decode step), and with the residual add before it;
//   blink::silu_mul(gate_up)            bf16(bf16(silu(gate)) * up) from the merged [T, 2I] rows.
// Numerics are eager's: every bf16 rounding at the same point, the RMSNorm statistics in fp32 in
// aten's summation order, silu as aten computes it (x / (1 + exp(-x)) in fp32) with simd_exp.h's
// exp instead of Sleef's (see prefill_ops.py for the measured difference).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>
#include <torch/library.h>

#include <immintrin.h>

#include "rms_norm.h"
#include "simd_exp.h"

#include <algorithm>
#include <cstdint>
#include <tuple>

namespace {

using bf16 = c10::BFloat16;
namespace norm = blink::norm;
namespace simd = blink::simd;

// Elements per task: an OpenMP fork/join costs ~2-5 us here, a row of 576 ~0.2 us, so rows are
// handed out in chunks of at least this many elements (~10-20 us of work).
constexpr int64_t kMinTaskElems = 32 * 1024;

int64_t grain(int64_t width) { return std::max<int64_t>(1, kMinTaskElems / width); }

// x is [rows, n] or [T, heads, n] (Qwen3's q/k heads: a strided view of the qkv output) with
// contiguous rows; row r starts at base(r).
struct Rows {
  const bf16* p;
  int64_t heads, s0, s1, n, count;
  explicit Rows(const at::Tensor& x)
      : p(x.data_ptr<bf16>()),
        heads(x.dim() == 3 ? x.size(1) : 1),
        s0(x.stride(0)),
        s1(x.dim() == 3 ? x.stride(1) : 0),
        n(x.size(-1)),
        count(x.dim() == 3 ? x.size(0) * x.size(1) : x.size(0)) {}
  const bf16* base(int64_t r) const { return p + (r / heads) * s0 + (r % heads) * s1; }
};

void check_norm(const at::Tensor& x, const at::Tensor& w) {
  TORCH_CHECK(x.dim() == 2 || x.dim() == 3, "rms_norm: x must be [rows, n] or [T, heads, n]");
  TORCH_CHECK(x.scalar_type() == at::kBFloat16 && w.scalar_type() == at::kBFloat16, "rms_norm: bf16 only");
  TORCH_CHECK(x.stride(-1) == 1, "rms_norm: rows must be contiguous");
  TORCH_CHECK(w.dim() == 1 && w.size(0) == x.size(-1) && w.is_contiguous(), "rms_norm: weight must be [n]");
}

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& w, double eps) {
  check_norm(x, w);
  const Rows in(x);
  auto y = at::empty(x.sizes(), x.options());
  const bf16* wp = w.data_ptr<bf16>();
  bf16* yp = y.data_ptr<bf16>();
  const float e = static_cast<float>(eps);
  at::parallel_for(0, in.count, grain(in.n), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) norm::rms_norm(in.base(r), wp, in.n, e, yp + r * in.n);
  });
  return y;
}

// (RMSNorm(x + residual), x + residual) for [rows, n] x and residual.
std::tuple<at::Tensor, at::Tensor> add_rms_norm(const at::Tensor& x, const at::Tensor& residual,
                                                const at::Tensor& w, double eps) {
  check_norm(x, w);
  TORCH_CHECK(x.dim() == 2 && residual.sizes() == x.sizes(), "add_rms_norm: x and residual must be [rows, n]");
  TORCH_CHECK(residual.scalar_type() == at::kBFloat16 && residual.stride(-1) == 1, "add_rms_norm: residual bf16 rows");
  const int64_t rows = x.size(0), n = x.size(1), xs = x.stride(0), rs = residual.stride(0);
  auto y = at::empty({rows, n}, x.options());
  auto sum = at::empty({rows, n}, x.options());
  const bf16 *xp = x.data_ptr<bf16>(), *rp = residual.data_ptr<bf16>(), *wp = w.data_ptr<bf16>();
  bf16 *yp = y.data_ptr<bf16>(), *sp = sum.data_ptr<bf16>();
  const float e = static_cast<float>(eps);
  at::parallel_for(0, rows, grain(n), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      norm::add(xp + r * xs, rp + r * rs, n, sp + r * n);
      norm::rms_norm(sp + r * n, wp, n, e, yp + r * n);
    }
  });
  return {y, sum};
}

// silu(g) = g / (1 + exp(-g)) in fp32, as aten's vectorised silu. exp16 is written for x <= 0
// but its reduction (x = n ln2 + r, |r| <= ln2/2) holds for moderate positive x too; -g is
// clamped at 100 (exp overflows to inf from 88.7), past which the reduction loses r and the
// result's sign (silu gave +0 where aten gives -0 for g < -1e8). Below -88.7, silu is -0, as aten's.
inline __m512 silu16(__m512 g) {
  const __m512 e = exp16(_mm512_min_ps(_mm512_set1_ps(100.f), _mm512_sub_ps(_mm512_setzero_ps(), g)));
  return _mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.f), e));
}

at::Tensor silu_mul(const at::Tensor& gate_up) {
  TORCH_CHECK(gate_up.dim() == 2 && gate_up.scalar_type() == at::kBFloat16, "silu_mul: gate_up must be bf16 [T, 2I]");
  TORCH_CHECK(gate_up.size(1) % 2 == 0 && gate_up.stride(1) == 1, "silu_mul: gate_up rows [gate | up], contiguous");
  const int64_t rows = gate_up.size(0), inter = gate_up.size(1) / 2, gs = gate_up.stride(0);
  auto y = at::empty({rows, inter}, gate_up.options());
  const bf16* gp = gate_up.data_ptr<bf16>();
  bf16* yp = y.data_ptr<bf16>();
  at::parallel_for(0, rows, grain(inter), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const bf16* g = gp + r * gs;
      bf16* out = yp + r * inter;
      for (int64_t i = 0; i < inter; i += 16) {
        const __mmask16 m = simd::lanes(i, inter);
        const __m512 act = simd::round_bf16(silu16(simd::load_bf16(g + i, m)));
        simd::store_bf16(out + i, _mm512_mul_ps(act, simd::load_bf16(g + inter + i, m)), m);
      }
    }
  });
  return y;
}

}  // namespace

// FRAGMENT: the blink namespace is shared with the other kernel libraries.
TORCH_LIBRARY_FRAGMENT(blink, m) {
  m.def("rms_norm(Tensor x, Tensor weight, float eps) -> Tensor");
  m.def("add_rms_norm(Tensor x, Tensor residual, Tensor weight, float eps) -> (Tensor, Tensor)");
  m.def("silu_mul(Tensor gate_up) -> Tensor");
}
TORCH_LIBRARY_IMPL(blink, CPU, m) {
  m.impl("rms_norm", &rms_norm);
  m.impl("add_rms_norm", &add_rms_norm);
  m.impl("silu_mul", &silu_mul);
}
