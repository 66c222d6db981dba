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

// Note [Half-precision products in f32 blocks]
// --------------------------------------------
// Why: the CPU BLAS has no f16 GEMM (nor a bf16 one where the CPU lacks AVX512_BF16), so those
// products are computed in f32 and rounded once. Casting both whole operands to f32 and the whole
// result back made three f32 copies as large as the product's tensors: in GPT-mini with f16
// parameters, 7.4 MiB of them inside the MLP's output projection's backward (dW = g^T h with h
// (2048, 512), dX = g W), the highest point of a checkpointed step's memory (docs/zero.md).
// What: C is computed a block at a time into an f32 block, from the operands' matching strips
// converted to f32 one K part (the GEMM's panel depth) at a time, and rounded into C once, when the
// block is finished. Blocks are square, 128 x 128 or smaller, so that the strips and the block stay
// within kWorkingFloats of f32 whatever the product's size (64 x 64 for parts 384 deep); the
// buffers come from the allocator, so the memory report counts them.
// Each strip is converted in its own layout (a transposed view into a transposed buffer), so the
// conversion reads memory in order.
// Same bits: the CPU's own GEMM sums every element of C as one chain of FMAs over k in K panels
// (Note [Our own GEMM for short products] in core/cpu/tiled_sgemm.cpp), whatever block of C the
// element falls in; a K part that is a multiple of the panel depth, added with beta = 1, is what its
// own panel loop does. So wherever that GEMM computes the f32 product of the converted operands, the
// blocks give the same bits as the whole casts did (tests/core/test_half_matmul.cpp); products
// OpenBLAS takes whole may differ in the last bits, as they do between thread counts.
constexpr int64_t kLargestBlock = 128;
constexpr int64_t kWorkingFloats = 64 * 1024;  // 256 KiB

// The side of the blocks of C for K parts `depth` deep: the largest power of two up to
// kLargestBlock whose two strips and block fit kWorkingFloats (at least 16).
int64_t block_side(int64_t depth) {
  int64_t side = kLargestBlock;
  while (side > 16 && depth * 2 * side + side * side > kWorkingFloats) side /= 2;
  return side;
}

// An uninitialised f32 buffer for up-to-(rows, cols) strips of `like`: row-major, or for a
// transposed view (the BLAS's other layout) the transpose of a row-major (cols, rows) buffer.
Tensor f32_strip_buffer(const Tensor& like, int64_t rows, int64_t cols) {
  const bool transposed = like.stride(0) == 1 && like.stride(1) != 1;
  if (transposed) return transpose(empty({cols, rows}, DType::f32, like.device()), 0, 1);
  return empty({rows, cols}, DType::f32, like.device());
}

// The (rows, cols) corner of a 2-D tensor, starting at (row0, col0).
Tensor block_of(const Tensor& t, int64_t row0, int64_t rows, int64_t col0, int64_t cols) {
  return slice(slice(t, 0, row0, row0 + rows, 1), 1, col0, col0 + cols, 1);
}

// out(M, N) = a(M, K) @ b(K, N), f16 / bf16 views, computed in f32 blocks.
void gemm_2d_in_f32_blocks(const Tensor& a, const Tensor& b, const Tensor& out) {
  const int64_t m = a.size(0), k = a.size(1), n = b.size(1);
  if (m == 0 || n == 0) return;
  const int64_t depth = std::min(k, backend_gemm_panel_depth(a.device()));
  if (depth == 0) return unary_(UnaryOp::fill, out, {0.0, 0.0});
  const int64_t side = block_side(depth);
  const int64_t block_rows = std::min(m, side), block_cols = std::min(n, side);
  const Tensor a_buffer = f32_strip_buffer(a, block_rows, depth);  // a's strips: (rows, part)
  const Tensor b_buffer = f32_strip_buffer(b, depth, block_cols);  // b's strips: (part, cols)
  const Tensor c_buffer = empty({block_rows, block_cols}, DType::f32, a.device());
  for (int64_t i0 = 0; i0 < m; i0 += block_rows) {
    const int64_t rows = std::min(block_rows, m - i0);
    for (int64_t j0 = 0; j0 < n; j0 += block_cols) {
      const int64_t cols = std::min(block_cols, n - j0);
      const Tensor c_block = block_of(c_buffer, 0, rows, 0, cols);
      for (int64_t k0 = 0; k0 < k; k0 += depth) {
        const int64_t part = std::min(depth, k - k0);
        const Tensor a_strip = block_of(a_buffer, 0, rows, 0, part), b_strip = block_of(b_buffer, 0, part, 0, cols);
        copy_(a_strip, block_of(a, i0, rows, k0, part));
        copy_(b_strip, block_of(b, k0, part, j0, cols));
        gemm_2d(a_strip, b_strip, c_block, /*accumulate=*/k0 > 0);
      }
      copy_(block_of(out, i0, rows, j0, cols), c_block);  // the one rounding to the dtype
    }
  }
}

}  // namespace

// A device whose GEMM has no f16/bf16 product (the CPU BLAS): compute those in f32 and round the result
// once, in blocks (Note [Half-precision products in f32 blocks]).
bool needs_f32_compute(const Tensor& a) {
  return (a.dtype() == DType::f16 || a.dtype() == DType::bf16) && !backend_gemm_takes(a.device(), a.dtype());
}

Tensor mm(const Tensor& a, const Tensor& b) {
  check_matmul_args("mm", a, b, 2);
  profiler::OpScope op("mm", gemm_flops(a, b));
  Tensor out = empty({a.size(0), b.size(1)}, a.dtype(), a.device());
  if (needs_f32_compute(a)) gemm_2d_in_f32_blocks(a, b, out);
  else gemm_2d(a, b, out);
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
  profiler::OpScope op("mm_out", gemm_flops(a, b));
  if (needs_f32_compute(a)) gemm_2d_in_f32_blocks(a, b, out);
  else gemm_2d(a, b, out);
}

Tensor bmm(const Tensor& a, const Tensor& b) {
  check_matmul_args("bmm", a, b, 3);
  RG_CHECK(a.size(0) == b.size(0), "bmm", "batch sizes differ: a ", a.desc(), ", b ", b.desc());
  profiler::OpScope op("bmm", static_cast<double>(a.size(0)) * gemm_flops(a, b));
  Tensor out = empty({a.size(0), a.size(1), b.size(2)}, a.dtype(), a.device());
  const bool in_f32_blocks = needs_f32_compute(a);
  for (int64_t i = 0; i < a.size(0); ++i) {
    if (in_f32_blocks) gemm_2d_in_f32_blocks(select(a, 0, i), select(b, 0, i), select(out, 0, i));
    else gemm_2d(select(a, 0, i), select(b, 0, i), select(out, 0, i));
  }
  return out;
}

}  // namespace ringgrad::native
