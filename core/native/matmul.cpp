// Matrix products. Each operand is passed to the BLAS as stored: a row-major matrix, or the
// transpose of one (a transposed view), with its row stride as the leading dimension. Only layouts
// the BLAS cannot express (broadcast strides, non-unit inner strides) are copied first.
#include "core/fusion.h"
#include "core/native/backend.h"
#include "core/native/native.h"
#include "core/profiler.h"

namespace ringgrad::native {
namespace {

// The FLOPs of out(M, N) = a(M, K) @ b(K, N): a multiply and an add per term.
double gemm_flops(const Tensor& a, const Tensor& b) {
  return 2.0 * static_cast<double>(a.size(-2)) * static_cast<double>(a.size(-1)) * static_cast<double>(b.size(-1));
}

struct BlasOperand {
  Tensor storage_view;  // what the pointer refers to
  bool transposed = false;
  int64_t ld = 1;
};

// m: a 2-D (rows, cols) view.
BlasOperand as_blas_operand(const Tensor& m) {
  const int64_t rows = m.size(0), cols = m.size(1);
  if (m.stride(1) == 1 && m.stride(0) >= std::max<int64_t>(1, cols)) return {m, false, m.stride(0)};
  if (m.stride(0) == 1 && m.stride(1) >= std::max<int64_t>(1, rows)) return {m, true, m.stride(1)};
  if (rows == 1 && m.stride(1) == 1) return {m, false, std::max<int64_t>(1, cols)};
  if (cols == 1 && m.stride(0) == 1) return {m, true, std::max<int64_t>(1, rows)};
  Tensor dense = contiguous(m);
  return {dense, false, std::max<int64_t>(1, cols)};
}

void check_matmul_args(const char* op, const Tensor& a, const Tensor& b, int64_t ndim) {
  check_same_device_dtype(op, a, b, /*same_dtype=*/false);
  RG_CHECK(a.dim() == ndim && b.dim() == ndim, op, "expects ", ndim, "-D tensors, got a ", a.desc(), ", b ", b.desc());
  RG_CHECK(a.dtype() == b.dtype(), op, "dtypes differ: a ", a.desc(), ", b ", b.desc());
  RG_CHECK(is_floating(a.dtype()), op, "needs floating-point tensors, got a ", a.desc(), ", b ", b.desc());
  RG_CHECK(a.size(-1) == b.size(-2), op, "inner dimensions differ: a ", a.desc(), ", b ", b.desc(), ": ", a.size(-1),
           " != ", b.size(-2));
}

// out(M, N) = a(M, K) @ b(K, N) (+ out when accumulate); all three 2-D views of one dtype the
// backend's GEMM takes.
void gemm_2d(const Tensor& a, const Tensor& b, const Tensor& out, bool accumulate = false) {
  const int64_t m = a.size(0), k = a.size(1), n = b.size(1);
  if (m == 0 || n == 0) return;
  if (k == 0) {
    if (!accumulate) unary_(UnaryOp::fill, out, {0.0, 0.0});
    return;
  }
  const BlasOperand pa = as_blas_operand(a), pb = as_blas_operand(b);
  backend_gemm(a.device(), a.dtype(), pa.transposed, pb.transposed, m, n, k, 1.0, pa.storage_view.raw_data(), pa.ld,
               pb.storage_view.raw_data(), pb.ld, accumulate ? 1.0 : 0.0, out.raw_data(), out.stride(0));
}

}  // namespace

// A device whose GEMM has no f16/bf16 product (the CPU BLAS): compute those in f32 and round the result
// once.
bool needs_f32_compute(const Tensor& a) {
  return (a.dtype() == DType::f16 || a.dtype() == DType::bf16) && !backend_gemm_takes(a.device(), a.dtype());
}

Tensor mm(const Tensor& a, const Tensor& b) {
  check_matmul_args("mm", a, b, 2);
  if (needs_f32_compute(a)) return cast(mm(cast(a, DType::f32), cast(b, DType::f32)), a.dtype());
  profiler::OpScope op("mm", gemm_flops(a, b));
  Tensor out = empty({a.size(0), b.size(1)}, a.dtype(), a.device());
  gemm_2d(a, b, out);
  return out;
}

namespace {
void check_matmul_out(const char* op, const Tensor& out, const Tensor& a, const Tensor& b) {
  RG_CHECK(out.dim() == 2 && out.size(0) == a.size(0) && out.size(1) == b.size(1) && out.dtype() == a.dtype() &&
               out.device() == a.device() && out.stride(1) == 1 && out.stride(0) >= std::max<int64_t>(1, out.size(1)),
           op, "out ", out.desc(), " must be a row-major (", a.size(0), ", ", b.size(1), ") ", dtype_name(a.dtype()),
           " matrix on ", a.device().str());
}
}  // namespace

void addmm_(const Tensor& out, const Tensor& a, const Tensor& b) {
  check_matmul_args("addmm_", a, b, 2);
  RG_CHECK(!needs_f32_compute(a), "addmm_", "CPU ", dtype_name(a.dtype()), " has no GEMM that accumulates; got a ",
           a.desc());
  check_matmul_out("addmm_", out, a, b);
  profiler::OpScope op("addmm_", gemm_flops(a, b));
  gemm_2d(a, b, out, /*accumulate=*/true);
}

Tensor mm_add_row(const Tensor& a, const Tensor& b, const Tensor& row, Tensor* gelu_out) {
  const char* name = gelu_out ? "addmm_bias_gelu" : "addmm_bias";
  check_matmul_args(name, a, b, 2);
  RG_CHECK(row.defined() && row.dim() == 1 && row.size(0) == b.size(1) && row.dtype() == a.dtype() &&
               row.device() == a.device(),
           name, "the row must be (", b.size(1), ",) ", dtype_name(a.dtype()), " on ", a.device().str(), ", got ",
           row.defined() ? row.desc() : std::string("undefined"));
  Tensor out = empty({a.size(0), b.size(1)}, a.dtype(), a.device());
  if (!fusion_enabled() || !backend_has_gemm_add_row(a.device(), a.dtype()) || a.size(1) == 0) {
    copy_(out, expand(row, out.shape()));  // every row = row; the GEMM adds a @ b to it
    addmm_(out, a, b);
    if (gelu_out) *gelu_out = unary(UnaryOp::gelu, out);
    return out;
  }
  profiler::OpScope op(name, gemm_flops(a, b));
  const BlasOperand pa = as_blas_operand(a), pb = as_blas_operand(b);
  const Tensor r = contiguous(row);
  if (gelu_out) *gelu_out = empty(out.shape(), out.dtype(), out.device());
  backend_gemm_add_row(a.device(), pa.transposed, pb.transposed, a.size(0), b.size(1), a.size(1),
                       pa.storage_view.data<float>(), pa.ld, pb.storage_view.data<float>(), pb.ld, r.data<float>(),
                       out.data<float>(), out.stride(0), gelu_out ? gelu_out->data<float>() : nullptr);
  return out;
}

void mm_out(const Tensor& out, const Tensor& a, const Tensor& b) {
  check_matmul_args("mm_out", a, b, 2);
  check_matmul_out("mm_out", out, a, b);
  if (needs_f32_compute(a)) return copy_(out, mm(a, b));
  profiler::OpScope op("mm_out", gemm_flops(a, b));
  gemm_2d(a, b, out);
}

Tensor bmm(const Tensor& a, const Tensor& b) {
  check_matmul_args("bmm", a, b, 3);
  RG_CHECK(a.size(0) == b.size(0), "bmm", "batch sizes differ: a ", a.desc(), ", b ", b.desc());
  if (needs_f32_compute(a)) return cast(bmm(cast(a, DType::f32), cast(b, DType::f32)), a.dtype());
  profiler::OpScope op("bmm", static_cast<double>(a.size(0)) * gemm_flops(a, b));
  Tensor out = empty({a.size(0), a.size(1), b.size(2)}, a.dtype(), a.device());
  for (int64_t i = 0; i < a.size(0); ++i) gemm_2d(select(a, 0, i), select(b, 0, i), select(out, 0, i));
  return out;
}

}  // namespace ringgrad::native
