// The public operations on tensors.
//
// Every function here checks its arguments (throwing ringgrad::Error naming the op, shapes, dtypes and
// devices), dispatches on the device in one place (core/native/*.cpp) and, when any input requires a
// gradient and grad mode is on, records a backward node. The forward and backward of each op sit side
// by side in autograd/functions/*.cpp.
//
// Binary ops broadcast as NumPy/PyTorch do and require both inputs to have the same dtype and device
// (convert explicitly with .to()). f16/bf16 compute in f32 and round once per result.
#pragma once

#include <cstdint>
#include <vector>

#include "core/random.h"
#include "core/tensor.h"

namespace ringgrad {

// ---- factories ------------------------------------------------------------------------------------
Tensor empty(const Shape& shape, TensorOptions options = {});
Tensor zeros(const Shape& shape, TensorOptions options = {});
Tensor ones(const Shape& shape, TensorOptions options = {});
Tensor full(const Shape& shape, double value, TensorOptions options = {});
Tensor arange(double start, double end, double step = 1.0, TensorOptions options = {});
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor empty_like(const Tensor& t);
// Copies `values` (converted to options.dtype) into a new tensor of `shape`.
Tensor from_vector(const std::vector<double>& values, const Shape& shape, TensorOptions options = {});
Tensor from_vector(const std::vector<float>& values, const Shape& shape, TensorOptions options = {});
// int64 values give an i64 tensor unless options.dtype says otherwise.
Tensor from_vector(const std::vector<int64_t>& values, const Shape& shape, TensorOptions options = {});
// Copies `shape`-many elements of type `dtype` from host memory `data`. The result has `dtype`
// unless options.dtype asks for a conversion.
Tensor from_blob(const void* data, const Shape& shape, DType dtype, TensorOptions options = {});
Tensor scalar_tensor(double value, TensorOptions options = {});

// Random tensors from a counter-based generator (core/random.h): element i of the result depends
// only on (seed, the generator's offset, i), never on thread count or device.
Tensor rand(const Shape& shape, Generator& gen, TensorOptions options = {});  // U[0, 1)
Tensor uniform(const Shape& shape, double lo, double hi, Generator& gen, TensorOptions options = {});
Tensor randn(const Shape& shape, Generator& gen, TensorOptions options = {});  // N(0, 1)
Tensor normal(const Shape& shape, double mean, double std, Generator& gen, TensorOptions options = {});
Tensor bernoulli(const Shape& shape, double p, Generator& gen, TensorOptions options = {});  // 0/1

// ---- elementwise (broadcasting) -------------------------------------------------------------------
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor add(const Tensor& a, double b);
Tensor mul(const Tensor& a, double b);
Tensor neg(const Tensor& a);
Tensor exp(const Tensor& a);
Tensor log(const Tensor& a);
Tensor sqrt(const Tensor& a);
Tensor rsqrt(const Tensor& a);
Tensor pow(const Tensor& a, double exponent);
Tensor abs(const Tensor& a);
Tensor tanh(const Tensor& a);
Tensor sigmoid(const Tensor& a);
Tensor relu(const Tensor& a);
Tensor gelu(const Tensor& a);  // tanh approximation, as GPT-2
Tensor clamp(const Tensor& a, double lo, double hi);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
// where(cond, a, b): a where cond != 0, else b; cond is u8 (as comparisons return).
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
// Comparisons return u8 tensors of 0/1 and have no gradient.
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);

Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a);
Tensor operator+(const Tensor& a, double b);
Tensor operator-(const Tensor& a, double b);
Tensor operator*(const Tensor& a, double b);
Tensor operator/(const Tensor& a, double b);
Tensor operator+(double a, const Tensor& b);
Tensor operator-(double a, const Tensor& b);
Tensor operator*(double a, const Tensor& b);

// ---- reductions -----------------------------------------------------------------------------------
// dims {} means all dims. Results accumulate in f64 for f32/f64 inputs and in f32 for f16/bf16.
Tensor sum(const Tensor& a, const Shape& dims = {}, bool keepdim = false);
Tensor mean(const Tensor& a, const Shape& dims = {}, bool keepdim = false);
Tensor var(const Tensor& a, const Shape& dims = {}, bool keepdim = false, bool unbiased = true);
Tensor max(const Tensor& a, int64_t dim, bool keepdim = false);     // values (gradient to the argmax)
Tensor argmax(const Tensor& a, int64_t dim, bool keepdim = false);  // i64 indices, no gradient
// Sums `a` down to `shape` (the shape it was broadcast from): the backward of broadcasting.
Tensor sum_to(const Tensor& a, const Shape& shape);

// ---- linear algebra -------------------------------------------------------------------------------
// matmul follows torch.matmul: 1-D·1-D, 2-D@2-D, batched with broadcast batch dims.
// Transposed views are handed to BLAS with a transpose flag, never copied.
Tensor matmul(const Tensor& a, const Tensor& b);
Tensor mm(const Tensor& a, const Tensor& b);   // a: (M, K), b: (K, N)
Tensor bmm(const Tensor& a, const Tensor& b);  // a: (B, M, K), b: (B, K, N)
// linear(x, w, b) = x @ w^T + b; x: (..., in), w: (out, in), b: (out) or undefined.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());
// gelu(linear(x, weight, bias)) as one op: the same values, with the GELU computed in the GEMM's
// epilogue on the CPU in f32 (with fusion on: core/fusion.h).
Tensor linear_gelu(const Tensor& x, const Tensor& weight, const Tensor& bias);

// ---- convolution and pooling ----------------------------------------------------------------------
// x: (N, C, H, W), weight: (O, C, KH, KW), bias: (O) or undefined -> (N, O, OH, OW) with
// OH = (H + 2 padding - KH) / stride + 1 (likewise OW). CPU: im2col + GEMM, one sample at a time.
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(), int64_t stride = 1,
              int64_t padding = 0);
// x: (N, C, H, W) -> (N, C, OH, OW); stride 0 means stride = kernel_size. Padding counts as -inf.
Tensor max_pool2d(const Tensor& x, int64_t kernel_size, int64_t stride = 0, int64_t padding = 0);
// The convolution block max_pool2d(relu(conv2d(x, weight, bias, stride, padding)), 2):
// (N, C, H, W) -> (N, O, OH / 2, OW / 2). On the CPU in f32 / f64 one fused kernel, bit for bit the
// composition's output and input / weight gradients (Note [The fused convolution block],
// core/cpu/conv_block.cpp); elsewhere, or with fusion off (core/fusion.h), the composition itself.
// nn::Sequential calls it for a Conv2d, ReLU, MaxPool2d(2) run (nn/sequential.h).
Tensor conv2d_relu_max_pool2d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(), int64_t stride = 1,
                              int64_t padding = 0);

// ---- transformer pieces (autograd/functions/transformer.cpp) -------------------------------------
// weight: (V, C), indices: any shape of i64 in [0, V) -> (*indices.shape, C). Backward: scatter-add.
Tensor embedding(const Tensor& weight, const Tensor& indices);
// Normalises over the last dim of x (..., C); weight / bias (C) may be undefined (1 / 0).
Tensor layer_norm(const Tensor& x, const Tensor& weight = Tensor(), const Tensor& bias = Tensor(), double eps = 1e-5);
// scores: (..., T, T) -> softmax over the last dim of scale * scores, key j > query i masked out.
Tensor causal_softmax(const Tensor& scores, double scale);
// q, k, v: (B, H, T, D) -> softmax(q k^T / sqrt(D), causal) v: (B, H, T, D).
Tensor causal_self_attention(const Tensor& q, const Tensor& k, const Tensor& v);
// qkv: (B, T, 3C), each row [q | k | v] as one Linear makes them -> (B, T, C), the heads' outputs
// side by side. Same math as the (q, k, v) form, without splitting heads into copies (CPU).
Tensor causal_self_attention(const Tensor& qkv, int64_t n_head);
// ... with dropout on the attention probabilities (rate in [0, 1); 0: none), masks drawn from gen.
Tensor causal_self_attention(const Tensor& qkv, int64_t n_head, double dropout, Generator& gen);

// ---- softmax and losses ---------------------------------------------------------------------------
Tensor softmax(const Tensor& a, int64_t dim);
Tensor log_softmax(const Tensor& a, int64_t dim);  // stable: x - max - log(sum(exp(x - max)))
// Fused log-softmax + negative log-likelihood. logits: (N, C); target: (N) i64 class indices.
// Mean over the targets that are not ignore_index (0 when all are ignored).
Tensor cross_entropy(const Tensor& logits, const Tensor& target, int64_t ignore_index = -100);

// ---- joining, splitting, indexing -----------------------------------------------------------------
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);
std::vector<Tensor> split(const Tensor& a, int64_t split_size, int64_t dim = 0);  // views
// index: 1-D i64. result.size(dim) == index.numel().
Tensor index_select(const Tensor& a, int64_t dim, const Tensor& index);
// index: i64 with a's number of dims; out[i][j] = a[index[i][j]][j] for dim 0, etc.
Tensor gather(const Tensor& a, int64_t dim, const Tensor& index);
// indices: i64 of any shape -> (..., num_classes) of `dtype` (default f32); no gradient.
Tensor one_hot(const Tensor& indices, int64_t num_classes, DType dtype = DType::f32);

// ---- comparison helpers for tests -----------------------------------------------------------------
// Same shape and every element equal (compared as double; NaN == NaN counts as equal).
bool equal(const Tensor& a, const Tensor& b);
// |a - b| <= atol + rtol * |b| elementwise, on shapes that are equal.
bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8);
// Largest |a - b| over all elements (shapes must match).
double max_abs_diff(const Tensor& a, const Tensor& b);

}  // namespace ringgrad
