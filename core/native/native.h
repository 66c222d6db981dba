// Op front ends without autograd: each checks its arguments, allocates the result and calls the
// kernel of the tensors' device through the backend seam (core/native/backend.h, over the kernels of
// core/kernels.h). The differentiable ops of core/ops.h are built on these (autograd/functions/);
// backward formulas call them too.
#pragma once

#include <vector>

#include "core/elementwise.h"
#include "core/kernels.h"
#include "core/tensor.h"

namespace ringgrad::native {

Tensor empty(const Shape& shape, DType dtype, Device device);

// ---- views (metadata only, share storage, no autograd) ---------------------------------------------
Tensor as_strided(const Tensor& a, const Shape& shape, const Shape& strides, int64_t offset);
// The strides a view of `a` with `shape` would have, or an empty vector when a's layout cannot be
// viewed that way without a copy. `shape` may hold one -1.
Shape infer_view_shape(const char* op, const Tensor& a, Shape shape);
Shape view_strides(const Tensor& a, const Shape& shape);
Tensor view(const Tensor& a, const Shape& shape);  // error when a copy would be needed
Tensor permute(const Tensor& a, const Shape& dims);
Tensor transpose(const Tensor& a, int64_t d0, int64_t d1);
Tensor slice(const Tensor& a, int64_t dim, int64_t start, int64_t end, int64_t step);
Tensor select(const Tensor& a, int64_t dim, int64_t index);
Tensor expand(const Tensor& a, const Shape& shape);
Tensor squeeze(const Tensor& a, int64_t dim);  // dim == -100: all size-1 dims
Tensor unsqueeze(const Tensor& a, int64_t dim);

// ---- elementwise ----------------------------------------------------------------------------------
// The broadcast shape of a and b, or an error naming `op` and both tensors.
Shape broadcast_shapes(const char* op, const Shape& a, const Shape& b);
// Checks that both tensors are defined, on one device, and (when same_dtype) of one dtype.
void check_same_device_dtype(const char* op, const Tensor& a, const Tensor& b, bool same_dtype = true);

Tensor unary(UnaryOp op, const Tensor& a, ScalarArgs s = {});
void unary_(UnaryOp op, const Tensor& self, ScalarArgs s = {});      // self = op(self)
Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b);        // comparisons return u8
void binary_(BinaryOp op, const Tensor& self, const Tensor& other);  // self = op(self, other)
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
// dst = src, broadcasting src to dst's shape, converting dtype and crossing devices as needed.
// non_blocking: a host-to-GPU copy from pinned memory is queued and returns at once (see
// copy_bytes in core/kernels.h); otherwise, and for every other pair of devices, copies are synchronous.
void copy_(const Tensor& dst, const Tensor& src, bool non_blocking = false);
Tensor cast(const Tensor& a, DType dtype);                                    // new contiguous tensor
Tensor to_device(const Tensor& a, Device device, bool non_blocking = false);  // new contiguous tensor
// A contiguous copy in page-locked host memory (a itself when it already is one); CUDA builds only.
Tensor pin_memory(const Tensor& a);
Tensor empty_pinned(const Shape& shape, DType dtype);  // uninitialised, page-locked, CPU
Tensor contiguous(const Tensor& a);                    // a itself when already contiguous

// ---- reductions -----------------------------------------------------------------------------------
// Normalises `dims` for a tensor of ndim dims: {} means all; negative dims wrap; duplicates are errors.
std::vector<int64_t> reduction_dims(const char* op, const Shape& dims, int64_t ndim);
// sum / mean / max / argmax over `dims`; argmax and max take exactly one dim.
Tensor reduce(RowReduction op, const Tensor& a, const Shape& dims, bool keepdim);

// ---- matrix products ------------------------------------------------------------------------------
Tensor mm(const Tensor& a, const Tensor& b);  // a: (M, K), b: (K, N) -> (M, N)
// out += a @ b: out (M, N) dense, of a's dtype and device; a float dtype the backend's GEMM takes
// directly (not CPU f16 / bf16). The GEMM accumulates into out (beta = 1).
void addmm_(const Tensor& out, const Tensor& a, const Tensor& b);
// a @ b + row, the row (N) added to every row: a linear layer's x W^T + b. A dtype addmm_ takes. With
// fusion on, CPU f32 starts the GEMM from the row (Note [A bias as the GEMM's starting point] in
// core/cpu/gemm.cpp, profiled as addmm_bias); otherwise the rows are filled first and addmm_ adds.
// The same bits either way. gelu_out, when given, receives GELU(out) (tanh form), computed by the
// same GEMM's epilogue (profiled as addmm_bias_gelu), or by the GELU op with fusion off.
Tensor mm_add_row(const Tensor& a, const Tensor& b, const Tensor& row, Tensor* gelu_out = nullptr);
// out = a @ b, written into out (M, N) dense, of a's dtype and device (any dtype mm takes).
void mm_out(const Tensor& out, const Tensor& a, const Tensor& b);
// Whether mm / bmm compute a's dtype in f32, a block at a time (CPU f16 / bf16: the BLAS has no GEMM
// for them; Note [Half-precision products in f32 blocks] in matmul.cpp), so that addmm_ cannot take it.
bool needs_f32_compute(const Tensor& a);
Tensor bmm(const Tensor& a, const Tensor& b);  // a: (B, M, K), b: (B, K, N) -> (B, M, N)

// ---- transformer ops (core/native/transformer.cpp) --------------------------------------------------
// layer_norm over the last dim of x (..., C); weight / bias (C) optional. mean, rstd: (rows) in the
// compute dtype (f32, or f64 for f64), for the backward.
struct LayerNormOutput {
  Tensor y, mean, rstd;
};
LayerNormOutput layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps);
// Each output pointer may be null (not needed).
void layer_norm_backward(const Tensor& g, const Tensor& x, const Tensor& weight, const Tensor& mean, const Tensor& rstd,
                         Tensor* dx, Tensor* dweight, Tensor* dbias);
// scores: (..., T, T). y = softmax over the last dim of scale * scores, with key j > query i masked.
Tensor causal_softmax(const Tensor& scores, double scale);
Tensor causal_softmax_backward(const Tensor& g, const Tensor& y, double scale);
// qkv: (B, T, 3C), rows [q | k | v], n_head heads of D = C / n_head -> y: (B, T, C), heads side by
// side, and what the backward needs, in the compute dtype: att, (B, n_head, T, T), the probabilities
// (only the causal blocks defined; Note [Attention without head copies] in core/cpu/attention.cpp);
// or, where the fused kernel ran (fusion on, f32 compute on a CPU with AVX-512, D a multiple of 32:
// Note [Fused causal attention] in core/cpu/fused_attention.cpp), no att but y_compute (y in the
// compute dtype: y itself for an f32 qkv) and lse: (B, n_head, T), each row's log-sum-exp.
struct AttentionOutput {
  Tensor y, att;
  Tensor y_compute, lse;
};
// dropout > 0: attention dropout with a keep mask drawn from Philox (seed, offset): the backward,
// given the same three numbers, recomputes the same mask.
// out = x * keep(e) / (1 - rate), keep(e) = dropout_keep(seed, offset, e, rate) (core/random.h) for
// element e of x in row-major order: the same mask on every device and thread count, and the same
// function masks the gradient in the backward.
Tensor dropout(const Tensor& x, double rate, uint64_t seed, uint64_t offset);
AttentionOutput causal_self_attention(const Tensor& qkv, int64_t n_head, double dropout = 0, uint64_t seed = 0,
                                      uint64_t offset = 0);
// saved: the forward's output (att, or y_compute and lse; y itself is not read).
Tensor causal_self_attention_backward(const Tensor& dy, const Tensor& qkv, const AttentionOutput& saved, int64_t n_head,
                                      double dropout = 0, uint64_t seed = 0, uint64_t offset = 0);

// ---- softmax family -------------------------------------------------------------------------------
Tensor softmax(const Tensor& a, int64_t dim, bool log);
// logits: (N, C) floating; target: (N) i64. Returns the mean loss (0-dim, logits' dtype) and, when
// wanted, the number of counted targets (0-dim i64 on the logits' device: nothing is read back).
Tensor cross_entropy(const Tensor& logits, const Tensor& target, int64_t ignore_index, Tensor* count);
// d loss / d logits for an upstream scalar gradient `grad`; count: the forward's.
Tensor cross_entropy_backward(const Tensor& grad, const Tensor& logits, const Tensor& target, int64_t ignore_index,
                              const Tensor& count);

// ---- indexing -------------------------------------------------------------------------------------
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim);
Tensor index_select(const Tensor& a, int64_t dim, const Tensor& index);
// out = zeros(shape); out.index_select(dim, index) += src (repeated indices accumulate).
Tensor index_add(const Shape& shape, int64_t dim, const Tensor& index, const Tensor& src);
Tensor gather(const Tensor& a, int64_t dim, const Tensor& index);
// out = zeros(shape); out[... index[p] ...] += src[p] along dim (the backward of gather).
Tensor scatter_add(const Shape& shape, int64_t dim, const Tensor& index, const Tensor& src);
Tensor one_hot(const Tensor& indices, int64_t num_classes, DType dtype);

// ---- convolution and pooling ----------------------------------------------------------------------------
// x: (N, C, H, W), weight: (O, C, KH, KW), bias: (O) or undefined -> (N, O, OH, OW)
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t stride, int64_t padding);
// Fills the requested gradients (null pointers are skipped).
void conv2d_backward(const Tensor& grad, const Tensor& x, const Tensor& weight, int64_t stride, int64_t padding,
                     Tensor* dx, Tensor* dweight, Tensor* dbias);
// x: (N, C, H, W) -> (N, C, OH, OW); stride 0 means stride = kernel. *indices gets, per output, the
// flat position (row * W + col) of its maximum within its (H, W) plane.
Tensor max_pool2d(const Tensor& x, int64_t kernel, int64_t stride, int64_t padding, Tensor* indices);
Tensor max_pool2d_backward(const Tensor& grad, const Shape& input_shape, const Tensor& indices);
// CUDA tensors only (backend_has_cudnn_pooling): cuDNN's max pooling, in x's own dtype, and its
// backward from x and y (Note [Max pooling on cuDNN], core/cuda/conv.cu). Same checks and output shape
// as max_pool2d.
Tensor max_pool2d_cudnn(const Tensor& x, int64_t kernel, int64_t stride, int64_t padding);
// The fused convolution block (Note [The fused convolution block], core/cpu/conv_block.cpp):
// max_pool2d(relu(conv2d(x, weight, bias, stride, padding)), 2) in one kernel, -> (N, O, OH/2, OW/2);
// *window gets, per output, where in its 2 x 2 window the maximum was (u8, 0..3). Only where
// conv_block_fusable says so; the backward fills the requested gradients (null pointers skipped).
bool conv_block_fusable(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t stride, int64_t padding);
Tensor conv2d_relu_max_pool2d(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t stride,
                              int64_t padding, Tensor* window);
void conv2d_relu_max_pool2d_backward(const Tensor& grad, const Tensor& x, const Tensor& weight, const Tensor& pooled,
                                     const Tensor& window, int64_t stride, int64_t padding, Tensor* dx, Tensor* dweight,
                                     Tensor* dbias);
Tensor max_pool2d_cudnn_backward(const Tensor& grad, const Tensor& x, const Tensor& y, int64_t kernel, int64_t stride,
                                 int64_t padding);

}  // namespace ringgrad::native
