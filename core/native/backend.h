// The backend seam: the one place where a kernel is chosen by device. Each backend_* function
// forwards to cpu:: or cuda:: (core/kernels.h); the capability questions (has_*, *_takes, ...) say
// what a device's backend can do where the front ends must choose between two ways of computing an
// op. The op front ends (core/native/*.cpp), autograd/, nn/ and optim/ call these and never look at
// a tensor's device themselves.
//
// The seam's files: this header, the kernel interface it dispatches to (core/kernels.h), and the two
// places that pick per-device runtime services rather than kernels: core/allocator.cpp (a device's
// allocator) and core/device.cpp (device selection).
//
// Without CUDA compiled in, a CUDA tensor cannot exist (its allocator throws), so the CUDA branch is
// simply absent. A kernel that exists on one backend only (the separate lists in core/kernels.h) is
// routed to an equivalent on the other device, or fails naming the op and the device.
#pragma once

#include "core/cpu_isa.h"
#include "core/error.h"
#include "core/kernels.h"

namespace ringgrad::native {

[[noreturn]] inline void no_backend(const char* op, Device d) {
  RG_FAIL(op, "no kernel for device ", d.str(), " in this build");
}

// For the kernels of one backend only: the front end asked the capability question first, so this is
// a caller's mistake, reported as such.
[[noreturn]] inline void only_on(const char* op, const char* backend, Device d) {
  RG_FAIL(op, "this kernel runs on ", backend, " only, not on ", d.str());
}

// `return cpu::call` or `return cuda::call` by the device d (call: a kernel call without its namespace).
#ifdef RINGGRAD_WITH_CUDA
#define RG_ON_BACKEND(d, op, call)        \
  do {                                    \
    if ((d).is_cpu()) return cpu::call;   \
    if ((d).is_cuda()) return cuda::call; \
    no_backend(op, d);                    \
  } while (0)
#else
#define RG_ON_BACKEND(d, op, call)      \
  do {                                  \
    if ((d).is_cpu()) return cpu::call; \
    no_backend(op, d);                  \
  } while (0)
#endif

// ---- elementwise ----------------------------------------------------------------------------------
inline void backend_unary(Device d, UnaryOp op, ScalarArgs s, DType t, const ElementwiseArgs& a) {
  RG_ON_BACKEND(d, unary_op_name(op), unary(op, s, t, a));
}

inline void backend_binary(Device d, BinaryOp op, DType t, const ElementwiseArgs& a) {
  RG_ON_BACKEND(d, binary_op_name(op), binary(op, t, a));
}

inline void backend_where(Device d, DType t, const ElementwiseArgs& a) { RG_ON_BACKEND(d, "where", where(t, a)); }

inline void backend_cast_copy(Device d, DType out, DType in, const ElementwiseArgs& a) {
  RG_ON_BACKEND(d, "copy", cast_copy(out, in, a));
}

// ---- copies between devices, and page-locked host memory ---------------------------------------------
// Whether bytes can move between the two devices (they differ): only the CUDA runtime moves them.
inline bool backend_can_copy_between(Device, Device) { return cuda_compiled(); }

// See cuda::copy_bytes in core/kernels.h.
inline void backend_copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes,
                               bool non_blocking, bool src_pinned) {
#ifdef RINGGRAD_WITH_CUDA
  return cuda::copy_bytes(dst, dst_device, src, src_device, nbytes, non_blocking, src_pinned);
#else
  (void)dst, (void)src, (void)nbytes, (void)non_blocking, (void)src_pinned;
  RG_FAIL("copy_", "cannot copy between ", src_device.str(), " and ", dst_device.str(), " in a build without CUDA");
#endif
}

// Page-locked host memory comes from the CUDA runtime (core/cuda/pinned.cu).
inline bool backend_has_pinned_memory() { return cuda_compiled(); }

inline void* backend_pinned_allocate(size_t nbytes) {
#ifdef RINGGRAD_WITH_CUDA
  return cuda::pinned_allocate(nbytes);
#else
  RG_FAIL("pin_memory", "page-locked memory needs the CUDA backend (", nbytes, " bytes)");
#endif
}

inline void backend_pinned_release(void* ptr, size_t nbytes) {
#ifdef RINGGRAD_WITH_CUDA
  cuda::pinned_release(ptr, nbytes);
#else
  (void)ptr, (void)nbytes;
#endif
}

// ---- reductions -------------------------------------------------------------------------------------
inline void backend_reduce_rows(Device d, RowReduction op, DType t, const void* in, void* out, int64_t rows,
                                int64_t cols) {
  RG_ON_BACKEND(d, "reduce", reduce_rows(op, t, in, out, rows, cols));
}

// Whether the device sums down the columns of a dense (rows, cols) input in place (cpu::reduce_cols),
// rather than needing the reduced dims moved last.
inline bool backend_has_reduce_cols(Device d) { return d.is_cpu(); }

inline void backend_reduce_cols(Device d, RowReduction op, DType t, const void* in, void* out, int64_t rows,
                                int64_t cols) {
  if (d.is_cpu()) return cpu::reduce_cols(op, t, in, out, rows, cols);
  only_on("reduce", "the CPU", d);
}

// ---- matrix products --------------------------------------------------------------------------------
// Whether the device's GEMM takes dtype t directly: f32 and f64 everywhere; f16 / bf16 on CUDA (cuBLAS,
// f32 accumulation); on the CPU, whose BLAS has neither, bf16 where the CPU has AVX512_BF16
// (Note [bf16 products on the CPU] in core/cpu/bf16_gemm.cpp).
inline bool backend_gemm_takes(Device d, DType t) {
  if (t == DType::f32 || t == DType::f64) return true;
  if (d.is_cpu()) return t == DType::bf16 && cpu_has_bf16_dot();
  return t == DType::f16 || t == DType::bf16;
}

// cpu::convert_rows: a conversion of dense rows at row strides (CPU only).
inline void backend_convert_rows(Device d, DType out_dtype, DType in_dtype, const void* in, int64_t in_ld, void* out,
                                 int64_t out_ld, int64_t rows, int64_t cols) {
  if (d.is_cpu()) return cpu::convert_rows(out_dtype, in_dtype, in, in_ld, out, out_ld, rows, cols);
  only_on("convert_rows", "the CPU", d);
}

// A depth at which a product the device's GEMM computes may be cut in K and summed part by part
// into C (beta = 1) without changing its bits: the CPU GEMM's K panel. (Only the CPU computes
// f16 / bf16 products in f32 parts: Note [Half-precision products in f32 blocks], matmul.cpp.)
inline int64_t backend_gemm_panel_depth(Device d) {
  if (d.is_cpu()) return cpu::gemm_panel_depth();
  only_on("matmul in f32 blocks", "the CPU", d);
}

inline void backend_gemm(Device d, DType t, bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha,
                         const void* a, int64_t lda, const void* b, int64_t ldb, double beta, void* c, int64_t ldc) {
  RG_ON_BACKEND(d, "matmul", gemm(t, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc));
}

// ---- rows: softmax, cross-entropy, layer_norm, causal softmax, dropout (core/{cpu,cuda}/rows.*) -------------
inline void backend_softmax_rows(Device d, DType t, const void* x, void* y, int64_t rows, int64_t cols, bool log) {
  RG_ON_BACKEND(d, log ? "log_softmax" : "softmax", softmax_rows(t, x, y, rows, cols, log));
}

inline void backend_nll_mean(Device d, DType t, const void* logp, const int64_t* target, int64_t n, int64_t c,
                             int64_t ignore_index, double* loss, int64_t* count) {
  RG_ON_BACKEND(d, "cross_entropy", nll_mean(t, logp, target, n, c, ignore_index, loss, count));
}

inline void backend_softmax_minus_one_hot(Device d, DType t, void* p, const int64_t* target, int64_t n, int64_t c,
                                          int64_t ignore_index, const void* grad, const int64_t* count) {
  RG_ON_BACKEND(d, "cross_entropy_backward", softmax_minus_one_hot(t, p, target, n, c, ignore_index, grad, count));
}

inline void backend_layer_norm_rows(Device d, DType t, const void* x, const void* w, const void* b, void* y, void* mean,
                                    void* rstd, int64_t rows, int64_t C, double eps) {
  RG_ON_BACKEND(d, "layer_norm", layer_norm_rows(t, x, w, b, y, mean, rstd, rows, C, eps));
}

inline void backend_layer_norm_backward_rows(Device d, DType t, const void* g, const void* x, const void* w,
                                             const void* mean, const void* rstd, void* dx, void* dw, void* db,
                                             int64_t rows, int64_t C) {
  RG_ON_BACKEND(d, "layer_norm_backward", layer_norm_backward_rows(t, g, x, w, mean, rstd, dx, dw, db, rows, C));
}

inline void backend_causal_softmax_rows(Device d, DType t, const void* s, void* y, int64_t mats, int64_t n,
                                        double scale) {
  RG_ON_BACKEND(d, "causal_softmax", causal_softmax_rows(t, s, y, mats, n, scale));
}

inline void backend_causal_softmax_backward_rows(Device d, DType t, const void* g, const void* y, void* ds,
                                                 int64_t mats, int64_t n, double scale) {
  RG_ON_BACKEND(d, "causal_softmax_backward", causal_softmax_backward_rows(t, g, y, ds, mats, n, scale));
}

inline void backend_dropout_flat(Device d, DType t, const void* in, void* out, int64_t count, double rate,
                                 uint64_t seed, uint64_t offset) {
  RG_ON_BACKEND(d, "dropout", dropout_flat(t, in, out, count, rate, seed, offset));
}

// ---- attention (core/{cpu,cuda}/attention.*) ---------------------------------------------------------
inline void backend_attention_forward(Device d, DType t, const void* qkv, void* y, void* att, int64_t B, int64_t n,
                                      int64_t C, int64_t H, double scale, const AttentionDropout& drop) {
  RG_ON_BACKEND(d, "causal_self_attention", attention_forward(t, qkv, y, att, B, n, C, H, scale, drop));
}

inline void backend_attention_backward(Device d, DType t, const void* dy, const void* qkv, const void* att, void* dqkv,
                                       int64_t B, int64_t n, int64_t C, int64_t H, double scale,
                                       const AttentionDropout& drop) {
  RG_ON_BACKEND(d, "causal_self_attention_backward",
                attention_backward(t, dy, qkv, att, dqkv, B, n, C, H, scale, drop));
}

// ---- indexing (core/{cpu,cuda}/indexing.*) -------------------------------------------------------------
// The dtype index_add / scatter_add accumulate in for tensors of dtype t: t itself on the CPU (adds in
// index order); f32 / f64 on CUDA, whose atomicAdd takes nothing narrower.
inline DType backend_accumulate_dtype(Device d, DType t) {
  if (d.is_cpu()) return t;
  return t == DType::f64 ? DType::f64 : DType::f32;
}

// Whether the host reads a tensor's indices and checks them before launching: on the CPU it does;
// a GPU's kernels check their own, since a host read would wait for the kernels before it
// (Note [Device-side index checks], core/cuda/device_checks.h).
inline bool backend_checks_indices_on_host(Device d) { return d.is_cpu(); }

inline void backend_index_select(Device d, size_t element_size, const void* src, const int64_t* index, void* out,
                                 int64_t outer, int64_t mid, int64_t count, int64_t inner) {
  RG_ON_BACKEND(d, "index_select", index_select(element_size, src, index, out, outer, mid, count, inner));
}

inline void backend_index_add(Device d, DType t, void* out, const int64_t* index, const void* src, int64_t outer,
                              int64_t mid, int64_t count, int64_t inner) {
  RG_ON_BACKEND(d, "index_add", index_add(t, out, index, src, outer, mid, count, inner));
}

inline void backend_gather(Device d, size_t element_size, const void* a, const int64_t* index, void* out, int64_t count,
                           const GatherGeometry& geometry) {
  RG_ON_BACKEND(d, "gather", gather(element_size, a, index, out, count, geometry));
}

inline void backend_scatter_add(Device d, DType t, void* out, const int64_t* index, const void* src, int64_t count,
                                const GatherGeometry& geometry) {
  RG_ON_BACKEND(d, "scatter_add", scatter_add(t, out, index, src, count, geometry));
}

inline void backend_one_hot(Device d, const int64_t* index, double* out, int64_t count, int64_t classes) {
  RG_ON_BACKEND(d, "one_hot", one_hot(index, out, count, classes));
}

// ---- convolution and pooling (core/{cpu,cuda}/conv.*) ---------------------------------------------------
// The dtype a device's convolution kernels take for tensors of dtype t: cuDNN convolves in the
// tensors' own dtype, the CPU in the compute dtype (f32, or f64 for f64 tensors).
inline DType backend_conv2d_dtype(Device d, DType t) { return d.is_cuda() || t == DType::f64 ? t : DType::f32; }

inline void backend_conv2d_forward(Device d, DType t, const ConvShape& s, const void* x, const void* w, void* y) {
  RG_ON_BACKEND(d, "conv2d", conv2d_forward(t, s, x, w, y));
}

inline void backend_conv2d_backward_data(Device d, DType t, const ConvShape& s, const void* dy, const void* w,
                                         void* dx) {
  RG_ON_BACKEND(d, "conv2d_backward", conv2d_backward_data(t, s, dy, w, dx));
}

inline void backend_conv2d_backward_filter(Device d, DType t, const ConvShape& s, const void* x, const void* dy,
                                           void* dw) {
  RG_ON_BACKEND(d, "conv2d_backward", conv2d_backward_filter(t, s, x, dy, dw));
}

inline void backend_max_pool2d(Device d, DType t, const void* x, void* y, int64_t* indices, int64_t planes, int64_t H,
                               int64_t W, int64_t OH, int64_t OW, int64_t kernel, int64_t stride, int64_t padding) {
  RG_ON_BACKEND(d, "max_pool2d", max_pool2d(t, x, y, indices, planes, H, W, OH, OW, kernel, stride, padding));
}

inline void backend_max_pool2d_backward(Device d, DType t, const void* dy, const int64_t* indices, void* dx,
                                        int64_t planes, int64_t plane_in, int64_t plane_out) {
  RG_ON_BACKEND(d, "max_pool2d_backward", max_pool2d_backward(t, dy, indices, dx, planes, plane_in, plane_out));
}

// Whether the device has cuDNN's max pooling (Note [Max pooling on cuDNN], core/cuda/conv.cu).
inline bool backend_has_cudnn_pooling(Device d) { return d.is_cuda(); }

// How autograd's max_pool2d runs on a device for a dtype: cuDNN's pooling, whose backward finds each
// window's maximum again from x and y, or the own kernel, which records each window's argmax for the
// backward. cuDNN where the device has it, but not for bf16 (Note [Max pooling on cuDNN]).
enum class MaxPoolAlgorithm { argmax, cudnn };
inline MaxPoolAlgorithm backend_max_pool_algorithm(Device d, DType t) {
  return backend_has_cudnn_pooling(d) && t != DType::bf16 ? MaxPoolAlgorithm::cudnn : MaxPoolAlgorithm::argmax;
}

inline void backend_max_pool2d_cudnn(Device d, DType t, const void* x, void* y, const PoolShape& s) {
#ifdef RINGGRAD_WITH_CUDA
  if (d.is_cuda()) return cuda::max_pool2d_cudnn(t, x, y, s);
#endif
  (void)t, (void)x, (void)y, (void)s;
  only_on("max_pool2d", "CUDA", d);
}

inline void backend_max_pool2d_cudnn_backward(Device d, DType t, const void* x, const void* y, const void* dy, void* dx,
                                              const PoolShape& s) {
#ifdef RINGGRAD_WITH_CUDA
  if (d.is_cuda()) return cuda::max_pool2d_cudnn_backward(t, x, y, dy, dx, s);
#endif
  (void)t, (void)x, (void)y, (void)dy, (void)dx, (void)s;
  only_on("max_pool2d backward", "CUDA", d);
}

// ---- optimizers (core/{cpu,cuda}/optim.*) ------------------------------------------------------------
inline void backend_sgd_update(Device d, DType t, void* param, const void* grad, void* master, void* momentum,
                               int64_t n, const SgdHyper& h) {
  RG_ON_BACKEND(d, "sgd", sgd_update(t, param, grad, master, momentum, n, h));
}

inline void backend_adam_update(Device d, DType t, void* param, const void* grad, void* master, void* exp_avg,
                                void* exp_avg_sq, int64_t n, const AdamHyper& h) {
  RG_ON_BACKEND(d, "adam", adam_update(t, param, grad, master, exp_avg, exp_avg_sq, n, h));
}

// Whether the device's updates are worth queueing for the multi-tensor launchers (optim::FusedUpdates):
// on CUDA a launch costs more than a small parameter's update; the CPU runs each as it is added.
inline bool backend_batches_updates(Device d) { return d.is_cuda(); }

// One launch per group of parameters on CUDA (Note [Multi-tensor updates], core/cuda/optim.cu); elsewhere
// the single updates, one after the other.
inline void backend_sgd_update_many(Device d, DType t, const SgdArgs* args, size_t count) {
#ifdef RINGGRAD_WITH_CUDA
  if (d.is_cuda()) return cuda::sgd_update_many(d.index, t, args, count);
#endif
  for (size_t i = 0; i < count; ++i)
    backend_sgd_update(d, t, args[i].param, args[i].grad, args[i].master, args[i].momentum, args[i].n, args[i].h);
}

inline void backend_adam_update_many(Device d, DType t, const AdamArgs* args, size_t count) {
#ifdef RINGGRAD_WITH_CUDA
  if (d.is_cuda()) return cuda::adam_update_many(d.index, t, args, count);
#endif
  for (size_t i = 0; i < count; ++i)
    backend_adam_update(d, t, args[i].param, args[i].grad, args[i].master, args[i].exp_avg, args[i].exp_avg_sq,
                        args[i].n, args[i].h);
}

// Whether the device unscales a gradient and checks it for inf / NaN in one pass (cpu::unscale_and_check);
// elsewhere GradScaler composes the same from elementwise ops and a sum.
inline bool backend_has_unscale_and_check(Device d) { return d.is_cpu(); }

inline bool backend_unscale_and_check(Device d, DType t, void* grad, int64_t n, float inv_scale) {
  if (d.is_cpu()) return cpu::unscale_and_check(t, grad, n, inv_scale);
  only_on("GradScaler", "the CPU", d);
}

// ---- the fused convolution block (CPU only) ----------------------------------------------------------
// Whether the device has core/cpu/conv_block.cpp's fused kernel for this dtype; elsewhere autograd's
// conv2d_relu_max_pool2d composes the plain ops.
inline bool backend_has_conv_block(Device d, DType t) { return d.is_cpu() && (t == DType::f32 || t == DType::f64); }

inline void backend_conv_block_forward(Device d, DType t, const ConvShape& s, const void* x, const void* w,
                                       const void* bias, void* pooled, uint8_t* window) {
  if (d.is_cpu()) return cpu::conv_block_forward(t, s, x, w, bias, pooled, window);
  only_on("conv2d_relu_max_pool2d", "the CPU", d);
}

inline void backend_conv_block_backward(Device d, DType t, const ConvShape& s, const void* x, const void* w,
                                        const void* pooled, const uint8_t* window, const void* dpooled, void* dx,
                                        void* dw, void* dbias) {
  if (d.is_cpu()) return cpu::conv_block_backward(t, s, x, w, pooled, window, dpooled, dx, dw, dbias);
  only_on("conv2d_relu_max_pool2d backward", "the CPU", d);
}

// ---- a GEMM that starts from a bias row (CPU only) ----------------------------------------------------
inline bool backend_has_gemm_add_row(Device d, DType t) { return d.is_cpu() && t == DType::f32; }

inline void backend_gemm_add_row(Device d, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a,
                                 int64_t lda, const float* b, int64_t ldb, const float* row, float* c, int64_t ldc,
                                 float* gelu) {
  if (d.is_cpu()) return cpu::gemm_add_row(ta, tb, m, n, k, a, lda, b, ldb, row, c, ldc, gelu);
  only_on("addmm_bias", "the CPU", d);
}

// ---- fused causal attention (CPU only) --------------------------------------------------------------
// Whether the device has core/cpu/fused_attention.cpp's kernel for this compute dtype and head size;
// elsewhere the attention kernels above run and keep the probabilities.
inline bool backend_has_fused_attention(Device d, DType t, int64_t head_dim) {
  return d.is_cpu() && t == DType::f32 && cpu::fused_attention_available(head_dim);
}

inline void backend_fused_attention_forward(Device d, const float* qkv, float* y, float* lse, int64_t B, int64_t n,
                                            int64_t C, int64_t H, double scale, const AttentionDropout& drop,
                                            int64_t first_sample) {
  if (d.is_cpu()) return cpu::fused_attention_forward(qkv, y, lse, B, n, C, H, scale, drop, first_sample);
  only_on("causal_self_attention (fused)", "the CPU", d);
}

inline void backend_fused_attention_backward(Device d, const float* dy, const float* qkv, const float* y,
                                             const float* lse, float* dqkv, int64_t B, int64_t n, int64_t C, int64_t H,
                                             double scale, const AttentionDropout& drop, int64_t first_sample) {
  if (d.is_cpu()) return cpu::fused_attention_backward(dy, qkv, y, lse, dqkv, B, n, C, H, scale, drop, first_sample);
  only_on("causal_self_attention_backward (fused)", "the CPU", d);
}

#undef RG_ON_BACKEND

}  // namespace ringgrad::native
