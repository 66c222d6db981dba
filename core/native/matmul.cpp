// Matrix products. Each operand is passed to the BLAS as stored: a row-major matrix, or the
// transpose of one (a transposed view), with its row stride as the leading dimension. Only layouts
// the BLAS cannot express (broadcast strides, non-unit inner strides) are copied first.
#include "core/fusion.h"
#include "core/native/backend.h"
#include "core/native/native.h"
#include "core/parallel.h"
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
// What: C is computed a panel of `rows` x `width` at a time in f32 and rounded into C once, when the
// panel is finished. For each K part (the GEMM's panel depth) the panel's strip of A is converted
// to f32 once, and B's strip `cols` columns at a time, each followed by the GEMM of that slice of
// the panel. So A is converted ceil(N / width) times and B ceil(M / rows) times; plan_blocks picks
// the panel that converts least within kWorkingFloats of f32 (192 KiB) per thread whatever the
// product's size; a large product spreads its panels over the pool's threads.
// The buffers come from the allocator, so the memory report counts them. Each strip is converted in
// the layout it is stored in (a transposed view into a transposed buffer), so that the conversion
// reads and writes dense rows (F16C, ~0.06 ns per value).
// Same bits: the CPU's own GEMM sums every element of C as one chain of FMAs over k in K panels
// (Note [Our own GEMM for short products] in core/cpu/tiled_sgemm.cpp), whatever block of C the
// element falls in; a K part that is a multiple of the panel depth, added with beta = 1, is what its
// own panel loop does. So wherever that GEMM computes the f32 product of the converted operands, the
// blocks give the same bits as the whole casts did (tests/core/test_half_matmul.cpp); products
// OpenBLAS takes whole may differ in the last bits, as they do between thread counts.
constexpr int64_t kWorkingFloats = 48 * 1024;  // 192 KiB
constexpr int64_t kStripCols = 32;             // columns of B converted at a time: one tile of the AVX-512 GEMM

struct BlockPlan {
  int64_t rows, width;  // the f32 panel of C
};

// The panel that converts the fewest values per multiply-add, ceil(N / width) / N + ceil(M / rows) / M
// (A's conversions per element of C's row, B's per element of its column), within kWorkingFloats:
// rows x width of C, rows x depth of A, depth x kStripCols of B. A product to be split over
// `threads` gets at least that many panels, shorter ones if need be.
BlockPlan plan_blocks(int64_t m, int64_t n, int64_t depth, int64_t threads) {
  const int64_t cols = std::min(n, kStripCols);
  BlockPlan best{std::min<int64_t>(m, 6), std::min(n, cols)};
  double best_cost = 1e300;
  for (int64_t width = cols; width < n + 32; width += 32) {
    const int64_t w = std::min(width, n);
    const int64_t room = (kWorkingFloats - depth * cols) / (w + depth);
    const int64_t rows = std::min(m, room / 6 * 6);  // whole 6-row tiles of the GEMM
    if (rows < std::min<int64_t>(m, 6)) break;       // wider panels leave even less room
    const double cost = static_cast<double>((n + w - 1) / w) / static_cast<double>(n) +
                        static_cast<double>((m + rows - 1) / rows) / static_cast<double>(m);
    if (cost < best_cost) best_cost = cost, best = {rows, w};
    if (w == n) break;
  }
  const int64_t groups = (n + best.width - 1) / best.width;
  if (groups * ((m + best.rows - 1) / best.rows) < threads) {  // rows for ceil(threads / groups) panels
    const int64_t row_panels = (threads + groups - 1) / groups;
    best.rows = std::min(best.rows, std::max<int64_t>(6, ((m + row_panels - 1) / row_panels + 5) / 6 * 6));
  }
  return best;
}

// A 2-D operand as the BLAS takes it: element (r, c) of the logical matrix at
// data + (transposed ? c * ld + r : r * ld + c) elements.
struct StoredMatrix {
  const char* data;
  bool transposed;
  int64_t ld;
  size_t element_size;
  const char* at(int64_t r, int64_t c) const {
    return data + static_cast<size_t>(transposed ? c * ld + r : r * ld + c) * element_size;
  }
};

// The (rows, cols) strip of `from` at (r0, c0), converted into the f32 buffer `to` laid out as
// `from` is (row-major with row stride to_ld, or transposed: its transpose row-major), so that the
// conversion runs along dense rows.
void convert_strip(Device device, DType dtype, const StoredMatrix& from, int64_t r0, int64_t c0, int64_t rows,
                   int64_t cols, float* to, int64_t to_ld) {
  if (from.transposed) backend_convert_rows(device, DType::f32, dtype, from.at(r0, c0), from.ld, to, to_ld, cols, rows);
  else backend_convert_rows(device, DType::f32, dtype, from.at(r0, c0), from.ld, to, to_ld, rows, cols);
}

// One thread's f32 buffers: A's strip, B's strip and C's panel.
struct BlockBuffers {
  Tensor a_strip, b_strip, panel;
  BlockBuffers(const BlockPlan& plan, int64_t depth, int64_t cols, Device device)
      : a_strip(empty({plan.rows * depth}, DType::f32, device)),
        b_strip(empty({depth * cols}, DType::f32, device)),
        panel(empty({plan.rows * plan.width}, DType::f32, device)) {}
};

// Below this many flops a product runs on the calling thread (the CPU GEMM's own threshold, core/cpu/gemm.cpp).
constexpr double kSplitFlops = 4e6;
// Each strip's GEMM (rows x kStripCols x depth, rows x depth <= kWorkingFloats) stays below it, so the
// CPU GEMM never splits a strip again inside a panel's thread.
static_assert(2.0 * kStripCols * kWorkingFloats < kSplitFlops);

// out(M, N) = a(M, K) @ b(K, N), f16 / bf16 views, computed in f32 blocks. Raw pointers throughout:
// views made per strip cost as much as the narrow strips' conversion. The panels are independent:
// a large product spreads them over the pool's threads, each with buffers of its own (the strips'
// GEMMs are too small for the CPU GEMM to split).
void gemm_2d_in_f32_blocks(const Tensor& a, const Tensor& b, const Tensor& out) {
  const int64_t m = a.size(0), k = a.size(1), n = b.size(1);
  if (m == 0 || n == 0) return;
  const Device device = a.device();
  const int64_t depth = std::min(k, backend_gemm_panel_depth(device));
  if (depth == 0) return unary_(UnaryOp::fill, out, {0.0, 0.0});
  const BlasOperand pa = as_blas_operand(a), pb = as_blas_operand(b);
  const size_t es = dtype_size(a.dtype());
  const StoredMatrix sa{static_cast<const char*>(pa.storage_view.raw_data()), pa.transposed, pa.ld, es};
  const StoredMatrix sb{static_cast<const char*>(pb.storage_view.raw_data()), pb.transposed, pb.ld, es};
  const double flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  const int64_t pool = flops >= kSplitFlops ? num_threads() : 1;
  const BlockPlan plan = plan_blocks(m, n, depth, pool);
  const int64_t cols = std::min(n, kStripCols);
  // A's strips (rows, part): row stride depth, or transposed (part, rows) with row stride plan.rows;
  // B's (part, cols): row stride cols, or transposed (cols, part) with row stride depth.
  const int64_t a_ld = pa.transposed ? plan.rows : depth, b_ld = pb.transposed ? depth : cols;
  char* c = static_cast<char*>(out.raw_data());
  const int64_t ldc = out.stride(0);
  const int64_t row_panels = (m + plan.rows - 1) / plan.rows, panels = row_panels * ((n + plan.width - 1) / plan.width);

  // Panel p: rows from i0, columns from g0 (C's panel row stride: its width).
  const auto compute_panels = [&](const BlockBuffers& buffers, int64_t first, int64_t last) {
    float* a_strip = buffers.a_strip.data<float>();
    float* b_strip = buffers.b_strip.data<float>();
    float* panel = buffers.panel.data<float>();
    for (int64_t p = first; p < last; ++p) {
      const int64_t i0 = (p % row_panels) * plan.rows, g0 = (p / row_panels) * plan.width;
      const int64_t rows = std::min(plan.rows, m - i0), width = std::min(plan.width, n - g0);
      for (int64_t k0 = 0; k0 < k; k0 += depth) {
        const int64_t part = std::min(depth, k - k0);
        convert_strip(device, a.dtype(), sa, i0, k0, rows, part, a_strip, a_ld);
        for (int64_t j = 0; j < width; j += cols) {
          const int64_t strip_cols = std::min(cols, width - j);
          convert_strip(device, b.dtype(), sb, k0, g0 + j, part, strip_cols, b_strip, b_ld);
          backend_gemm(device, DType::f32, pa.transposed, pb.transposed, rows, strip_cols, part, 1.0, a_strip, a_ld,
                       b_strip, b_ld, k0 > 0 ? 1.0 : 0.0, panel + j, width);
        }
      }
      // the one rounding to the dtype
      backend_convert_rows(device, out.dtype(), DType::f32, panel, width, c + static_cast<size_t>(i0 * ldc + g0) * es,
                           ldc, rows, width);
    }
  };
  const int64_t threads = std::min(pool, panels);
  std::vector<BlockBuffers> buffers;
  for (int64_t t = 0; t < threads; ++t) buffers.emplace_back(plan, depth, cols, device);
  if (threads == 1) return compute_panels(buffers[0], 0, panels);
  parallel_for(threads, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t t = lo; t < hi; ++t) compute_panels(buffers[t], panels * t / threads, panels * (t + 1) / threads);
  });
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
