// torch.ops.blink.int8_gemv: the weight-only int8 matmul of int8_matmul.h for 1 to kMaxRows bf16
// activation rows, split over torch's threads by output rows. Semantics are aten's
// _weight_int8pack_mm (x bf16 [M, K], w int8 [N, K], scales bf16 [N], y bf16 [M, N]) up to fp32
// summation order.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>

#include "int8_matmul.h"

namespace {

// Output rows per task unit: a multiple of every weight-row blocking in int8_matmul.h, so only the
// last unit has a ragged end.
constexpr int64_t kSplitRows = 16;
// Each task streams at least ~64 KiB of weights: smaller chunks cost more in fork/join than the
// second thread saves (the OpenMP region is ~2-5 us here).
constexpr int64_t kMinTaskBytes = 64 * 1024;

namespace mm = blink::int8mm;

void check_args(const at::Tensor& x, const at::Tensor& w, const at::Tensor& scales) {
  TORCH_CHECK(x.dim() == 2 && w.dim() == 2 && scales.dim() == 1, "int8_gemv: x [M, K], w [N, K], scales [N]");
  TORCH_CHECK(w.scalar_type() == at::kChar, "int8_gemv: w must be int8");
  TORCH_CHECK(x.scalar_type() == at::kBFloat16, "int8_gemv: x must be bf16");
  TORCH_CHECK(scales.scalar_type() == at::kBFloat16, "int8_gemv: scales must be bf16");
  const int64_t M = x.size(0), K = x.size(1), N = w.size(0);
  TORCH_CHECK(w.size(1) == K && scales.size(0) == N, "int8_gemv: shape mismatch");
  TORCH_CHECK(K % 16 == 0, "int8_gemv: K must be a multiple of 16, got ", K);
  TORCH_CHECK(M >= 1 && M <= mm::kMaxRows, "int8_gemv: serves 1 to ", mm::kMaxRows, " rows, got ", M);
}

at::Tensor int8_gemv(const at::Tensor& x, const at::Tensor& w, const at::Tensor& scales) {
  check_args(x, w, scales);
  const int64_t M = x.size(0), K = x.size(1), N = w.size(0);
  auto xc = x.contiguous();
  auto wc = w.contiguous();
  auto sc = scales.contiguous();
  auto scratch = at::empty({mm::scratch_bytes(M, K)}, x.options().dtype(at::kByte));
  mm::prepare(xc.data_ptr<c10::BFloat16>(), K, M, K, scratch.data_ptr());
  auto y = at::empty({M, N}, x.options());
  const void* sp = scratch.data_ptr();
  const int8_t* wp = wc.data_ptr<int8_t>();
  const c10::BFloat16* s = sc.data_ptr<c10::BFloat16>();
  c10::BFloat16* yp = y.data_ptr<c10::BFloat16>();
  const int64_t units = (N + kSplitRows - 1) / kSplitRows;
  const int64_t grain = std::max<int64_t>(1, kMinTaskBytes / (kSplitRows * K));
  at::parallel_for(0, units, grain, [&](int64_t u0, int64_t u1) {
    mm::rows(sp, M, K, wp, s, yp, N, u0 * kSplitRows, std::min(N, u1 * kSplitRows));
  });
  return y;
}

// Test-only: output rows [n0, n1) from one rows() call on one thread into a NaN-filled y whose
// rows are ldy >= N apart (returned whole, [M, ldy]), so a test sees the ragged-range results,
// that nothing else was written, and the strides: x may be a row-strided view (ldx = its stride),
// and the scratch sits one byte off alignment, as a caller's buffer may.
at::Tensor int8_gemv_rows(const at::Tensor& x, const at::Tensor& w, const at::Tensor& scales,
                          int64_t n0, int64_t n1, int64_t ldy) {
  check_args(x, w, scales);
  const int64_t M = x.size(0), K = x.size(1), N = w.size(0);
  TORCH_CHECK(0 <= n0 && n0 < n1 && n1 <= N && ldy >= N, "int8_gemv_rows: need 0 <= n0 < n1 <= N <= ldy");
  TORCH_CHECK(x.stride(1) == 1, "int8_gemv_rows: x rows must be contiguous");
  auto wc = w.contiguous();
  auto sc = scales.contiguous();
  auto scratch = at::empty({mm::scratch_bytes(M, K) + 1}, x.options().dtype(at::kByte));
  void* sp = scratch.data_ptr<uint8_t>() + 1;
  mm::prepare(x.data_ptr<c10::BFloat16>(), x.stride(0), M, K, sp);
  auto y = at::full({M, ldy}, NAN, x.options());
  mm::rows(sp, M, K, wc.data_ptr<int8_t>(), sc.data_ptr<c10::BFloat16>(), y.data_ptr<c10::BFloat16>(), ldy,
           n0, n1);
  return y;
}

}  // namespace

// FRAGMENT: the blink namespace is shared with the attention kernels and paged_decode_op.py.
TORCH_LIBRARY_FRAGMENT(blink, m) {
  m.def("int8_gemv(Tensor x, Tensor w, Tensor scales) -> Tensor");
  m.def("int8_gemv_rows(Tensor x, Tensor w, Tensor scales, int n0, int n1, int ldy) -> Tensor");
}
TORCH_LIBRARY_IMPL(blink, CPU, m) {
  m.impl("int8_gemv", &int8_gemv);
  m.impl("int8_gemv_rows", &int8_gemv_rows);
}
