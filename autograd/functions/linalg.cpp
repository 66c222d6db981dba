// Differentiable matrix products. Gradients use transposed views (no copies):
//   C = A B  ->  dA = dC B^T,  dB = A^T dC
#include "autograd/engine.h"
#include "core/fusion.h"
#include "core/native/native.h"
#include "core/ops.h"

namespace ringgrad {

using autograd::NeedsGrad;
using autograd::record;
using autograd::TensorList;

// a: (M, K), b: (K, N) -> (M, N)
Tensor mm(const Tensor& a, const Tensor& b) {
  Tensor out = native::mm(a, b);
  record("mm", {out}, {a, b}, [a = a.detach(), b = b.detach()](const TensorList& g, const NeedsGrad& n) {
    return TensorList{n[0] ? native::mm(g[0], native::transpose(b, 0, 1)) : Tensor(),
                      n[1] ? native::mm(native::transpose(a, 0, 1), g[0]) : Tensor()};
  });
  return out;
}

// a: (B, M, K), b: (B, K, N) -> (B, M, N)
Tensor bmm(const Tensor& a, const Tensor& b) {
  Tensor out = native::bmm(a, b);
  record("bmm", {out}, {a, b}, [a = a.detach(), b = b.detach()](const TensorList& g, const NeedsGrad& n) {
    return TensorList{n[0] ? native::bmm(g[0], native::transpose(b, 1, 2)) : Tensor(),
                      n[1] ? native::bmm(native::transpose(a, 1, 2), g[0]) : Tensor()};
  });
  return out;
}

// torch.matmul semantics, composed from mm / bmm and views, so its gradient needs no formula of its own.
Tensor matmul(const Tensor& a, const Tensor& b) {
  RG_CHECK(a.defined() && b.defined() && a.dim() >= 1 && b.dim() >= 1, "matmul",
           "needs tensors with at least 1 dim, got a ", a.desc(), ", b ", b.desc());
  native::check_same_device_dtype("matmul", a, b);
  RG_CHECK(a.size(-1) == b.size(b.dim() == 1 ? 0 : -2), "matmul", "inner dimensions differ: a ", a.desc(), ", b ",
           b.desc(), ": ", a.size(-1), " != ", b.size(b.dim() == 1 ? 0 : -2));
  if (a.dim() == 1 && b.dim() == 1) return mm(a.unsqueeze(0), b.unsqueeze(1)).reshape({});
  if (a.dim() == 1) return matmul(a.unsqueeze(0), b).squeeze(-2);
  if (b.dim() == 1) return matmul(a, b.unsqueeze(1)).squeeze(-1);
  if (a.dim() == 2 && b.dim() == 2) return mm(a, b);
  const int64_t m = a.size(-2), k = a.size(-1), n = b.size(-1);
  if (b.dim() == 2) {
    // (..., M, K) @ (K, N): fold the batch dims into M, one GEMM.
    Shape out_shape(a.shape().begin(), a.shape().end() - 1);
    out_shape.push_back(n);
    return mm(a.reshape({-1, k}), b).reshape(out_shape);
  }
  // Broadcast the batch dims, then one bmm over the flattened batch.
  const Shape batch_a(a.shape().begin(), a.shape().end() - 2), batch_b(b.shape().begin(), b.shape().end() - 2);
  const Shape batch = native::broadcast_shapes("matmul", batch_a, batch_b);
  Shape sa = batch, sb = batch, out_shape = batch;
  sa.insert(sa.end(), {m, k});
  sb.insert(sb.end(), {k, n});
  out_shape.insert(out_shape.end(), {m, n});
  const int64_t nb = shape_numel(batch);
  return bmm(a.expand(sa).reshape({nb, m, k}), b.expand(sb).reshape({nb, k, n})).reshape(out_shape);
}

namespace {

void check_linear_args(const char* op, const Tensor& x, const Tensor& weight, const Tensor& bias) {
  RG_CHECK(weight.defined() && weight.dim() == 2, op, "weight must be (out, in), got ", weight.desc());
  RG_CHECK(x.defined() && x.dim() >= 1 && x.size(-1) == weight.size(1), op, "input ", x.desc(),
           " does not end in in_features = ", weight.size(1), " of weight ", weight.desc());
  RG_CHECK(!bias.defined() || (bias.dim() == 1 && bias.size(0) == weight.size(0)), op, "bias ", bias.desc(),
           " must be (", weight.size(0), ",) for weight ", weight.desc());
}

// Whether y = x W^T + b can start the GEMM from b (addmm_ takes the dtype; everything alike).
bool bias_starts_gemm(const Tensor& x2, const Tensor& weight, const Tensor& bias) {
  return bias.defined() && !native::needs_f32_compute(x2) && bias.dtype() == x2.dtype() &&
         bias.device() == x2.device() && x2.dtype() == weight.dtype();
}

// The gradients of y2 = x2 W^T (+ b) from g2 = dL/dy2: (N, out).
TensorList linear_grads(const Tensor& g2, const Tensor& x2, const Tensor& w, const Shape& x_shape, bool has_bias,
                        const NeedsGrad& n) {
  TensorList grads{n[0] ? native::view(native::mm(g2, w), x_shape) : Tensor(), Tensor()};
  if (n[1]) {
    // dW straight into the weight's gradient destination when it has one (a DDP bucket
    // slot): Note [Gradient destinations] in autograd/accumulate_grad.h.
    const Tensor dy_t = native::transpose(g2, 0, 1);  // (out, N)
    grads[1] = n.destination(1, w.shape(), g2.dtype(), g2.device());
    if (grads[1].defined()) native::mm_out(grads[1], dy_t, x2);
    else grads[1] = native::mm(dy_t, x2);
  }
  if (has_bias) grads.push_back(n[2] ? native::reduce(RowReduction::sum, g2, {0}, false) : Tensor());
  return grads;
}

}  // namespace

// x: (..., in), weight: (out, in), bias: (out) -> (..., out). One node instead of matmul + t + add,
// because the composed backward is slow in two places: the weight gradient arrives as the transpose
// of (x^T dy) -- a strided view that accumulating into the contiguous .grad must copy element by
// element -- and the bias gradient as a separate sum_to. Here the batch dims fold into N rows and
//   y = x W^T (+ b),   dx = dy W,   dW = dy^T x (row-major (out, in) directly, dy^T a transposed view
//   the BLAS takes as is),   db = column sums of dy.
// With a bias, y starts as b in every row and the GEMM adds x W^T to it (beta = 1): OpenBLAS zeroes C
// before a beta = 0 product (sgemm_beta, a pass over y), and adding b after would be another read and
// write of y. On the CPU in f32 the GEMM starts from b itself and y is written once (Note [A bias as
// the GEMM's starting point] in core/cpu/gemm.cpp). (CPU f16 / bf16, computed in f32 by mm, keep the
// separate add.)
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  check_linear_args("linear", x, weight, bias);
  const int64_t in = weight.size(1), out_features = weight.size(0);
  Shape out_shape = x.shape();
  out_shape.back() = out_features;
  const Tensor x2 = native::view(native::contiguous(x), {-1, in});  // (N, in)
  const Tensor wt = native::transpose(weight, 0, 1);                // (in, out), a view
  Tensor y2;                                                        // (N, out)
  if (bias_starts_gemm(x2, weight, bias)) {
    y2 = native::mm_add_row(x2, wt, bias);  // every row b, plus x W^T
  } else {
    y2 = native::mm(x2, wt);
    if (bias.defined()) native::binary_(BinaryOp::add, y2, bias);  // each row += b
  }
  Tensor y = native::view(y2, out_shape);
  std::vector<Tensor> inputs{x, weight};
  if (bias.defined()) inputs.push_back(bias);
  record("linear", {y}, inputs,
         [x2 = x2.detach(), w = weight.detach(), x_shape = x.shape(), has_bias = bias.defined(),
          out_features](const TensorList& g, const NeedsGrad& n) {
           const Tensor g2 = native::view(native::contiguous(g[0]), {-1, out_features});  // (N, out)
           return linear_grads(g2, x2, w, x_shape, has_bias, n);
         });
  return y;
}

// gelu(linear(x, weight, bias)) in one node: where the GEMM starts from the bias, its epilogue also
// writes GELU of each tile while it is in cache (Note [A bias as the GEMM's starting point]), and the
// node keeps the pre-activation for the backward, dpre = gelu'(pre) g, then linear's gradients. The
// same values as the two ops, to the bit; with fusion off (core/fusion.h), without a bias, or in a
// dtype the bias cannot start, it is the two ops.
Tensor linear_gelu(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  check_linear_args("linear_gelu", x, weight, bias);
  const int64_t in = weight.size(1), out_features = weight.size(0);
  const Tensor x2 = native::view(native::contiguous(x), {-1, in});  // (N, in)
  if (!fusion_enabled() || !bias_starts_gemm(x2, weight, bias)) return gelu(linear(x, weight, bias));
  Shape out_shape = x.shape();
  out_shape.back() = out_features;
  Tensor act2;                                                                              // (N, out)
  const Tensor pre = native::mm_add_row(x2, native::transpose(weight, 0, 1), bias, &act2);  // (N, out)
  Tensor y = native::view(act2, out_shape);
  record("linear_gelu", {y}, {x, weight, bias},
         [x2 = x2.detach(), w = weight.detach(), pre, x_shape = x.shape(), out_features](const TensorList& g,
                                                                                         const NeedsGrad& n) {
           const Tensor g2 = native::view(native::contiguous(g[0]), {-1, out_features});  // (N, out)
           return linear_grads(native::binary(BinaryOp::gelu_backward, g2, pre), x2, w, x_shape, true, n);
         });
  return y;
}

}  // namespace ringgrad
