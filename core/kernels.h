// The kernel interface each backend implements, with identical signatures in ringgrad::cpu
// (core/cpu/) and ringgrad::cuda (core/cuda/). Kernels see raw pointers, sizes and dtypes only:
// argument checking, output allocation and dense / dtype conversions happen in the op front ends
// (core/native/*.cpp), and the choice of backend in the backend seam (core/native/backend.h), the
// one place that looks at a tensor's device. All pointers of one call live on that backend's device.
//
// One concept, one file name on both sides: core/cpu/rows.cpp <-> core/cuda/rows.cu, and likewise
// elementwise, reduce, gemm, attention, indexing, conv and optim. RINGGRAD_BACKEND_KERNELS below is
// the list both implement; the kernels that exist on one backend only are listed, commented, in its
// namespace, and the seam routes the other device to an equivalent or fails naming the op.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "core/allocator.h"
#include "core/device.h"
#include "core/dtype.h"
#include "core/elementwise.h"
#include "core/optim_math.h"

namespace ringgrad {

// Reductions over the last axis of a dense (rows, cols) input, one output per row. (Not to be confused
// with dist::ReduceOp, the combining op of a collective.)
enum class RowReduction : uint8_t { sum, mean, max, argmax };

// What sum / mean of T accumulate in, on every backend: double for f32 / f64 (a training step sums
// millions of terms), float for f16 / bf16 (whose values carry 8-11 bits anyway), int64 for integers.
template <class T>
using RowAccumulator = std::conditional_t<std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>, float,
                                          std::conditional_t<std::is_floating_point_v<T>, double, int64_t>>;

// gather / scatter_add: position p of the dense index tensor (shape index_shape) maps to the element
// of `a` (strides a_strides) at p's coordinates with the one along `dim` replaced by index[p].
struct GatherGeometry {
  static constexpr int kMaxDims = 8;
  int ndim = 0, dim = 0;
  int64_t index_shape[kMaxDims] = {};
  int64_t a_strides[kMaxDims] = {};
  int64_t dim_size = 0;  // a's size along dim: the index values' bound
};

// A convolution, NCHW, square stride / padding: x (N, C, H, W), w (O, C, KH, KW), y (N, O, OH, OW).
struct ConvShape {
  int64_t N, C, H, W, O, KH, KW, stride, padding, OH, OW;
};

// A max pooling: x (N, C, H, W) -> y (N, C, OH, OW), square kernel, stride and padding.
struct PoolShape {
  int64_t N, C, H, W, OH, OW, kernel, stride, padding;
};

// Attention dropout (GPT-2's attn_pdrop): y = (p * keep / (1 - rate)) v. The mask is not stored: the
// keep bit of probability (item, i, j) is a Philox draw at element e = (item n + i) n + j (counter
// offset + e / 4, word e % 4, key seed -- core/random.h), so the backward recomputes it exactly, on
// either backend.
struct AttentionDropout {
  double rate = 0;  // 0: none
  uint64_t seed = 0, offset = 0;
};

// One parameter's update for the multi-tensor launchers: its pointers (null where a state is
// absent), element count and hyperparameters.
struct SgdArgs {
  void* param;
  const void* grad;
  void* master;
  void* momentum;
  int64_t n;
  SgdHyper h;
};
struct AdamArgs {
  void* param;
  const void* grad;
  void* master;
  void* exp_avg;
  void* exp_avg_sq;
  int64_t n;
  AdamHyper h;
};

// ---- the kernels of every backend ---------------------------------------------------------------------
// Row, attention, indexing-add and pooling kernels take the front ends' compute dtype: f32, or f64 for
// f64 tensors (the front ends compute f16 / bf16 in f32 and round once).
#define RINGGRAD_BACKEND_KERNELS                                                                                       \
  /* ---- elementwise.cpp / .cu: functors of core/elementwise.h over strided operands ---- */                          \
  /* operands: 0 out, 1 in; out and in have `dtype` */                                                                 \
  void unary(UnaryOp op, ScalarArgs s, DType dtype, const ElementwiseArgs& args);                                      \
  /* operands: 0 out, 1 a, 2 b; a and b have `dtype`; out too, or u8 for comparisons */                                \
  void binary(BinaryOp op, DType dtype, const ElementwiseArgs& args);                                                  \
  /* operands: 0 out, 1 cond (u8), 2 a, 3 b */                                                                         \
  void where(DType dtype, const ElementwiseArgs& args);                                                                \
  /* operands: 0 out (out_dtype), 1 in (in_dtype); converts with round-to-nearest-even */                              \
  void cast_copy(DType out_dtype, DType in_dtype, const ElementwiseArgs& args);                                        \
  /* ---- reduce.cpp / .cu ---- */                                                                                     \
  /* in: dense (rows, cols) of dtype; out: rows elements of dtype (i64 for argmax). */                                 \
  /* sum/mean accumulate in double (f32, f64) or float (f16, bf16). */                                                 \
  void reduce_rows(RowReduction op, DType dtype, const void* in, void* out, int64_t rows, int64_t cols);               \
  /* ---- gemm.cpp / .cu ---- */                                                                                       \
  /* Row-major C(m, n) = alpha * op(A)(m, k) * op(B)(k, n) + beta * C, f32 or f64 (and f16/bf16 with */                \
  /* f32 accumulation where backend_gemm_takes, core/native/backend.h, says so). lda/ldb/ldc are */                    \
  /* row strides of A, B, C as stored. */                                                                              \
  void gemm(DType dtype, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const void* a,     \
            int64_t lda, const void* b, int64_t ldb, double beta, void* c, int64_t ldc);                               \
  /* ---- rows.cpp / .cu: dense rows in the compute dtype ---- */                                                      \
  /* softmax (log: log_softmax) over the last dim of x, y: (rows, cols), shifted by the row maximum. */                \
  void softmax_rows(DType dtype, const void* x, void* y, int64_t rows, int64_t cols, bool log);                        \
  /* cross-entropy, without a host round trip: *count (one i64, on the device) = the rows with */                      \
  /* target[i] != ignore_index, *loss (one f64) = their mean of -logp[i, target[i]], 0 when none; */                   \
  /* and the gradient p = (softmax - onehot(target)) * (*grad / *count) in place, ignored rows */                      \
  /* zeroed (grad: one element of dtype). logp, p: (n, c); target: (n), checked by the CPU front */                    \
  /* end, by the CUDA kernels (Note [Device-side index checks], core/cuda/device_checks.h). */                         \
  void nll_mean(DType dtype, const void* logp, const int64_t* target, int64_t n, int64_t c, int64_t ignore_index,      \
                double* loss, int64_t* count);                                                                         \
  void softmax_minus_one_hot(DType dtype, void* p, const int64_t* target, int64_t n, int64_t c, int64_t ignore_index,  \
                             const void* grad, const int64_t* count);                                                  \
  /* layer_norm: x, y, dx (rows, C); w, b, dw, db (C) or null; mean, rstd (rows); rstd = */                            \
  /* 1 / sqrt(var + eps) (biased variance). The backward skips null outputs. */                                        \
  void layer_norm_rows(DType dtype, const void* x, const void* w, const void* b, void* y, void* mean, void* rstd,      \
                       int64_t rows, int64_t C, double eps);                                                           \
  void layer_norm_backward_rows(DType dtype, const void* g, const void* x, const void* w, const void* mean,            \
                                const void* rstd, void* dx, void* dw, void* db, int64_t rows, int64_t C);              \
  /* s, y, g, ds: (mats, n, n), the causal softmax of scale * s (key j > query i masked) and its */                    \
  /* backward; y may be s, ds may be g. */                                                                             \
  void causal_softmax_rows(DType dtype, const void* s, void* y, int64_t mats, int64_t n, double scale);                \
  void causal_softmax_backward_rows(DType dtype, const void* g, const void* y, void* ds, int64_t mats, int64_t n,      \
                                    double scale);                                                                     \
  /* out[e] = in[e] * keep(e) / (1 - rate) for the flat index e < count, keep = dropout_keep(seed, */                  \
  /* offset, e, rate) of core/random.h (the mask attention dropout recomputes). in may be out. */                      \
  void dropout_flat(DType dtype, const void* in, void* out, int64_t count, double rate, uint64_t seed,                 \
                    uint64_t offset);                                                                                  \
  /* ---- attention.cpp / .cu: causal self-attention from the packed projection ---- */                                \
  /* qkv: (B, n, 3C), rows [q | k | v], H heads of D = C / H; y: (B, n, C); att: (B, H, n, n), the */                  \
  /* probabilities the backward needs (its causal blocks at least); dy: (B, n, C); dqkv: (B, n, 3C), */                \
  /* every element written. scale = 1 / sqrt(D). */                                                                    \
  void attention_forward(DType dtype, const void* qkv, void* y, void* att, int64_t B, int64_t n, int64_t C, int64_t H, \
                         double scale, const AttentionDropout& drop);                                                  \
  void attention_backward(DType dtype, const void* dy, const void* qkv, const void* att, void* dqkv, int64_t B,        \
                          int64_t n, int64_t C, int64_t H, double scale, const AttentionDropout& drop);                \
  /* ---- indexing.cpp / .cu: a dense tensor split around `dim` as (outer, mid, inner); index */                       \
  /* values are checked by the CPU front end, by the CUDA kernels (Note [Device-side index checks]) ---- */            \
  /* index_select: out (outer, count, inner) = src (outer, mid, inner) rows index[k]; any dtype. */                    \
  void index_select(size_t element_size, const void* src, const int64_t* index, void* out, int64_t outer, int64_t mid, \
                    int64_t count, int64_t inner);                                                                     \
  /* out (outer, mid, inner) += src (outer, count, inner) at rows index[k], in dtype, which the */                     \
  /* seam's backend_accumulate_dtype chose (CUDA: f32 / f64 atomic adds). */                                           \
  void index_add(DType dtype, void* out, const int64_t* index, const void* src, int64_t outer, int64_t mid,            \
                 int64_t count, int64_t inner);                                                                        \
  /* gather: out[p] = a[... index[p] ...] (GatherGeometry); any dtype. */                                              \
  void gather(size_t element_size, const void* a, const int64_t* index, void* out, int64_t count,                      \
              const GatherGeometry& geometry);                                                                         \
  /* scatter_add: out[... index[p] ...] += src[p], in dtype as index_add. */                                           \
  void scatter_add(DType dtype, void* out, const int64_t* index, const void* src, int64_t count,                       \
                   const GatherGeometry& geometry);                                                                    \
  /* out (count, classes), zeroed by the caller: out[i, index[i]] = 1. */                                              \
  void one_hot(const int64_t* index, double* out, int64_t count, int64_t classes);                                     \
  /* ---- conv.cpp / .cu: convolution, max pooling with argmax ---- */                                                 \
  /* x (N, C, H, W), w (O, C, KH, KW), y / dy (N, O, OH, OW), all dense; dx / dw are overwritten. */                   \
  /* CUDA: cuDNN in f32 / f64 / f16 / bf16 (f32 compute for the 16-bit types). CPU: im2col + GEMM */                   \
  /* one sample at a time in the compute dtype, f32 or f64 (Note [Convolution one sample at a */                       \
  /* time] in core/cpu/conv.cpp); the seam's backend_conv2d_dtype says which dtype a device takes. */                  \
  void conv2d_forward(DType dtype, const ConvShape& s, const void* x, const void* w, void* y);                         \
  void conv2d_backward_data(DType dtype, const ConvShape& s, const void* dy, const void* w, void* dx);                 \
  void conv2d_backward_filter(DType dtype, const ConvShape& s, const void* x, const void* dy, void* dw);               \
  /* over planes = N * C planes of (H, W) -> (OH, OW); indices[p] = flat position of the maximum */                    \
  /* in its plane (core/pool_math.h). The backward overwrites dx: (planes, H, W) with the gradient. */                 \
  void max_pool2d(DType dtype, const void* x, void* y, int64_t* indices, int64_t planes, int64_t H, int64_t W,         \
                  int64_t OH, int64_t OW, int64_t kernel, int64_t stride, int64_t padding);                            \
  void max_pool2d_backward(DType dtype, const void* dy, const int64_t* indices, void* dx, int64_t planes,              \
                           int64_t plane_in, int64_t plane_out);                                                       \
  /* ---- optim.cpp / .cu: the fused updates of core/optim_math.h ---- */                                              \
  /* n elements of dtype param_dtype (P), dense; master and the states are S (core/optim_math.h) */                    \
  /* or null. */                                                                                                       \
  void sgd_update(DType param_dtype, void* param, const void* grad, void* master, void* momentum, int64_t n,           \
                  const SgdHyper& h);                                                                                  \
  void adam_update(DType param_dtype, void* param, const void* grad, void* master, void* exp_avg, void* exp_avg_sq,    \
                   int64_t n, const AdamHyper& h);

namespace cpu {
RINGGRAD_BACKEND_KERNELS

// ---- CPU only ---------------------------------------------------------------------------------------
// sum / mean over the leading dim of a dense (rows, cols) input without transposing it first:
// out[j] = sum_i in[i, j] (cols outputs; a bias gradient), accumulating as reduce_rows does (double
// for f32). The seam asks backend_has_reduce_cols; CUDA transposes and reduces rows instead.
void reduce_cols(RowReduction op, DType dtype, const void* in, void* out, int64_t rows, int64_t cols);
// GradScaler: grad *= inv_scale in place (n dense elements, any floating dtype), returning whether
// any element is inf or NaN. CUDA composes it from elementwise ops and a sum (backend_has_unscale_and_check).
bool unscale_and_check(DType dtype, void* grad, int64_t n, float inv_scale);
// The convolution block conv -> + bias -> ReLU -> 2 x 2 max pooling with stride 2, one sample at a
// time while its convolution output is in cache (Note [The fused convolution block] in
// core/cpu/conv_block.cpp); f32 or f64, every tensor dense. x (N, C, H, W), w (O, C, KH, KW), bias
// (O) or null; pooled and window (N, O, OH / 2, OW / 2), window holding where in its 2 x 2 window
// each maximum was (0..3, row-major). The backward overwrites dx, dw and dbias, each of which may be
// null (not wanted), from the pooled output's gradient dpooled.
void conv_block_forward(DType dtype, const ConvShape& s, const void* x, const void* w, const void* bias, void* pooled,
                        uint8_t* window);
void conv_block_backward(DType dtype, const ConvShape& s, const void* x, const void* w, const void* pooled,
                         const uint8_t* window, const void* dpooled, void* dx, void* dw, void* dbias);

// f32 C (m, n) = op(A) op(B) + row, the row (n) added to every row of C, which is written once (Note
// [A bias as the GEMM's starting point] in core/cpu/gemm.cpp): the same bits as filling C with the
// row and then gemm with beta = 1. Arguments as gemm's. gelu, when not null (row stride ldc), also
// receives GELU(C), with the bits of the GELU op on C.
void gemm_add_row(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                  const float* b, int64_t ldb, const float* row, float* c, int64_t ldc, float* gelu = nullptr);
// out(r, :) = in(r, :) converted from in_dtype to out_dtype (one rounding), for rows x cols values
// whose rows are dense at row strides in_ld / out_ld (in elements): copy_'s conversion without its
// per-row indexing, for narrow strips (Note [Half-precision products in f32 blocks],
// core/native/matmul.cpp). Any pair of floating dtypes.
void convert_rows(DType out_dtype, DType in_dtype, const void* in, int64_t in_ld, void* out, int64_t out_ld,
                  int64_t rows, int64_t cols);
// The depth of the K panels in which the CPU's own f32 GEMM (Note [Our own GEMM for short products] in
// core/cpu/tiled_sgemm.cpp) sums a product: cut in K at multiples of it, with beta = 1 after the
// first part, a product it computes keeps its bits.
int64_t gemm_panel_depth();
// Causal self-attention without its probabilities (Note [Fused causal attention] in
// core/cpu/fused_attention.cpp): f32, layouts as attention_forward / attention_backward, with lse:
// (B, H, n), each row's log-sum-exp of its scaled scores, in place of att; the backward reads the
// forward's y. Available where AVX-512 is selected and the head size D = C / H is a multiple of 32.
// The B samples may be part of a batch: first_sample is the first one's index in it, so that dropout
// drops what it drops for the whole batch in one call.
bool fused_attention_available(int64_t head_dim);
void fused_attention_forward(const float* qkv, float* y, float* lse, int64_t B, int64_t n, int64_t C, int64_t H,
                             double scale, const AttentionDropout& drop, int64_t first_sample = 0);
void fused_attention_backward(const float* dy, const float* qkv, const float* y, const float* lse, float* dqkv,
                              int64_t B, int64_t n, int64_t C, int64_t H, double scale, const AttentionDropout& drop,
                              int64_t first_sample = 0);

Allocator& allocator();
}  // namespace cpu

#ifdef RINGGRAD_WITH_CUDA
namespace cuda {
RINGGRAD_BACKEND_KERNELS

// ---- CUDA only --------------------------------------------------------------------------------------
// cuDNN max pooling (Note [Max pooling on cuDNN], core/cuda/conv.cu) in any floating dtype, without
// argmax; the backward finds each window's maximum from x and y and overwrites dx. The seam fails on
// other devices (backend_has_cudnn_pooling).
void max_pool2d_cudnn(DType dtype, const void* x, void* y, const PoolShape& s);
void max_pool2d_cudnn_backward(DType dtype, const void* x, const void* y, const void* dy, void* dx, const PoolShape& s);
// Every parameter of `args` on GPU `device`, of dtype param_dtype, each at most once: one kernel
// launch per group of up to a few dozen parameters (Note [Multi-tensor updates] in core/cuda/optim.cu).
// The seam runs them one by one on the CPU (backend_sgd_update_many).
void sgd_update_many(int device, DType param_dtype, const SgdArgs* args, size_t count);
void adam_update_many(int device, DType param_dtype, const AdamArgs* args, size_t count);

// ---- the CUDA runtime (not kernels): allocators, devices, copies, pinned memory ---------------------
Allocator& allocator(int device);
int device_count();
// Copies bytes between any two of {host, device}; synchronous with respect to the host, except a
// host-to-device copy with non_blocking from pinned memory (src_pinned): that one is queued on the
// default stream (before any kernel launched later) and returns at once.
void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes,
                bool non_blocking = false, bool src_pinned = false);
// Page-locked host memory (core/cuda/pinned.cu): a released block is reused only after every copy
// queued before its release has finished.
void* pinned_allocate(size_t nbytes);
void pinned_release(void* ptr, size_t nbytes);
void pinned_note_use(const void* ptr, int device);  // an async copy from ptr was queued on `device`
// The process's own GPU (core/cuda/device.cu, Note [The home device]): chosen by dist::init for the
// local rank and by parse_device; host-side driver calls (pinned allocation) use its context, and
// every thread makes it current before its first CUDA call. home_device() is 0 until one is chosen.
void set_home_device(int device);
int home_device();
MemoryStats pinned_memory_stats();
}  // namespace cuda
#endif

#undef RINGGRAD_BACKEND_KERNELS

}  // namespace ringgrad
