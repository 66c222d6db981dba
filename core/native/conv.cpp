// conv2d and max_pool2d front ends: argument checks, output sizes, dtype conversions, and the kernels
// of the tensors' device through the backend seam (core/cpu/conv.cpp, core/cuda/conv.cu).
//
// conv2d runs the device's convolution kernels in the dtype it takes (backend_conv2d_dtype): cuDNN in
// the tensors' own dtype, the CPU in f32 (f64 for f64), f16 / bf16 tensors converted around it. The
// CPU's kernels lower the convolution to im2col + GEMM one sample at a time (Note [Convolution one
// sample at a time] in core/cpu/conv.cpp); nothing is kept from the forward for the backward.
//
// Dims: N batch, C input channels, O output channels, H/W input height/width, KH/KW kernel,
// OH/OW output height/width.
#include "core/fusion.h"
#include "core/native/backend.h"
#include "core/native/native.h"
#include "core/profiler.h"

namespace ringgrad::native {
namespace {

ConvShape conv_geometry(const Tensor& x, const Tensor& weight, int64_t stride, int64_t padding) {
  RG_CHECK(x.defined() && weight.defined() && x.dim() == 4 && weight.dim() == 4, "conv2d",
           "expects x (N, C, H, W) and weight (O, C, KH, KW), got x ", x.desc(), ", weight ", weight.desc());
  check_same_device_dtype("conv2d", x, weight);
  RG_CHECK(is_floating(x.dtype()), "conv2d", "needs floating-point tensors, got ", x.desc());
  RG_CHECK(x.size(1) == weight.size(1), "conv2d", "input channels differ: x ", x.desc(), " has ", x.size(1),
           ", weight ", weight.desc(), " expects ", weight.size(1));
  RG_CHECK(stride >= 1 && padding >= 0, "conv2d", "stride must be >= 1 and padding >= 0, got stride ", stride,
           ", padding ", padding);
  ConvShape g{x.size(0), x.size(1), x.size(2), x.size(3), weight.size(0), weight.size(2), weight.size(3),
              stride,    padding,   0,         0};
  g.OH = (g.H + 2 * padding - g.KH) / stride + 1;
  g.OW = (g.W + 2 * padding - g.KW) / stride + 1;
  RG_CHECK(g.H + 2 * padding >= g.KH && g.W + 2 * padding >= g.KW, "conv2d", "kernel ", g.KH, "x", g.KW,
           " is larger than the padded input ", x.desc(), " (padding ", padding, ")");
  return g;
}

// The FLOPs of the convolution's product (a multiply and an add per term), the same for the forward
// and for each of the backward's two products (data, filter).
double conv_flops(const ConvShape& g) {
  return 2.0 * static_cast<double>(g.N * g.O * g.OH * g.OW) * static_cast<double>(g.C * g.KH * g.KW);
}

// The dtype the CPU-style kernels compute in (pooling): f32, or f64 for f64 tensors.
DType compute_dtype(DType t) { return t == DType::f64 ? DType::f64 : DType::f32; }

// t as the dtype the device convolves in, dense.
Tensor conv_operand(const Tensor& t, DType kt) { return contiguous(t.dtype() == kt ? t : cast(t, kt)); }

}  // namespace

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t stride, int64_t padding) {
  const ConvShape g = conv_geometry(x, weight, stride, padding);
  if (bias.defined())
    RG_CHECK(bias.dim() == 1 && bias.size(0) == g.O && bias.dtype() == x.dtype() && bias.device() == x.device(),
             "conv2d", "bias ", bias.desc(), " must be (", g.O, ",) ", dtype_name(x.dtype()), " on ", x.device().str());
  profiler::OpScope op("conv2d", conv_flops(g));
  const DType kt = backend_conv2d_dtype(x.device(), x.dtype());
  Tensor xc = conv_operand(x, kt), wc = conv_operand(weight, kt);
  Tensor out = empty({g.N, g.O, g.OH, g.OW}, kt, x.device());
  if (out.numel() > 0) backend_conv2d_forward(x.device(), kt, g, xc.raw_data(), wc.raw_data(), out.raw_data());
  if (bias.defined()) binary_(BinaryOp::add, out, view(cast(bias, kt), {1, g.O, 1, 1}));
  return out.dtype() == x.dtype() ? out : cast(out, x.dtype());
}

void conv2d_backward(const Tensor& grad, const Tensor& x, const Tensor& weight, int64_t stride, int64_t padding,
                     Tensor* dx, Tensor* dweight, Tensor* dbias) {
  const ConvShape g = conv_geometry(x, weight, stride, padding);
  profiler::OpScope op("conv2d_backward");  // its two products below are ops of their own
  const DType kt = backend_conv2d_dtype(x.device(), x.dtype());
  Tensor dy = conv_operand(grad, kt);  // (N, O, OH, OW)
  if (dbias && (kt == DType::f32 || kt == DType::f64)) {
    // Over each (OH·OW) row of every sample, then over the samples: two passes over dense rows
    // instead of a transposing copy of dy. (A 16-bit dy is summed in one pass instead, so that the
    // per-sample sums are not rounded to 16 bits.)
    Tensor per_sample = reduce(RowReduction::sum, view(dy, {g.N, g.O, g.OH * g.OW}), {2}, false);  // (N, O)
    *dbias = cast(reduce(RowReduction::sum, per_sample, {0}, false), x.dtype());
  } else if (dbias) {
    *dbias = cast(reduce(RowReduction::sum, dy, {0, 2, 3}, false), x.dtype());
  }
  if (dweight) {
    profiler::OpScope product("conv2d_backward_filter", conv_flops(g));
    Tensor dw = empty(weight.shape(), kt, weight.device());
    if (dy.numel() > 0)
      backend_conv2d_backward_filter(x.device(), kt, g, conv_operand(x, kt).raw_data(), dy.raw_data(), dw.raw_data());
    else dw.zero_();
    *dweight = dw.dtype() == weight.dtype() ? dw : cast(dw, weight.dtype());
  }
  if (dx) {
    profiler::OpScope product("conv2d_backward_data", conv_flops(g));
    Tensor d = empty(x.shape(), kt, x.device());
    if (dy.numel() > 0)
      backend_conv2d_backward_data(x.device(), kt, g, dy.raw_data(), conv_operand(weight, kt).raw_data(), d.raw_data());
    else d.zero_();
    *dx = d.dtype() == x.dtype() ? d : cast(d, x.dtype());
  }
}

// ---- the fused convolution block ----------------------------------------------------------------------
// Fusable: x and weight dense-able CPU tensors of one dtype the kernel computes in, a bias of that
// dtype (or none), a valid geometry with a non-empty batch and a pooled output of at least 1 x 1,
// and fusion on (core/fusion.h). Anything else takes the plain ops, whose checks then name what is
// wrong.
bool conv_block_fusable(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t stride, int64_t padding) {
  if (!fusion_enabled() || !x.defined() || !weight.defined() || x.dim() != 4 || weight.dim() != 4) return false;
  if (!backend_has_conv_block(x.device(), x.dtype()) || weight.device() != x.device() || weight.dtype() != x.dtype())
    return false;
  if (bias.defined() &&
      (bias.dim() != 1 || bias.size(0) != weight.size(0) || bias.dtype() != x.dtype() || bias.device() != x.device()))
    return false;
  if (x.size(0) < 1 || x.size(1) != weight.size(1) || stride < 1 || padding < 0) return false;
  const int64_t oh_span = x.size(2) + 2 * padding - weight.size(2), ow_span = x.size(3) + 2 * padding - weight.size(3);
  return oh_span >= 0 && ow_span >= 0 && oh_span / stride + 1 >= 2 && ow_span / stride + 1 >= 2;
}

Tensor conv2d_relu_max_pool2d(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t stride,
                              int64_t padding, Tensor* window) {
  RG_CHECK(conv_block_fusable(x, weight, bias, stride, padding), "conv2d_relu_max_pool2d",
           "the fused kernel does not take x ", x.desc(), ", weight ", weight.desc(), ", bias ",
           bias.defined() ? bias.desc() : std::string("(none)"), " (stride ", stride, ", padding ", padding, ")");
  const ConvShape g = conv_geometry(x, weight, stride, padding);
  const int64_t ph = g.OH / 2, pw = g.OW / 2;
  // The convolution's FLOPs; reads x and writes the pooled output and its window bytes.
  profiler::OpScope op("conv2d_relu_max_pool2d", conv_flops(g),
                       static_cast<double>(x.nbytes()) +
                           static_cast<double>(g.N * g.O * ph * pw) * static_cast<double>(x.element_size() + 1));
  const Tensor xc = contiguous(x), wc = contiguous(weight), bc = bias.defined() ? contiguous(bias) : Tensor();
  Tensor pooled = empty({g.N, g.O, ph, pw}, x.dtype(), x.device());
  Tensor places = empty({g.N, g.O, ph, pw}, DType::u8, x.device());
  backend_conv_block_forward(x.device(), x.dtype(), g, xc.raw_data(), wc.raw_data(),
                             bc.defined() ? bc.raw_data() : nullptr, pooled.raw_data(), places.data<uint8_t>());
  *window = places;
  return pooled;
}

void conv2d_relu_max_pool2d_backward(const Tensor& grad, const Tensor& x, const Tensor& weight, const Tensor& pooled,
                                     const Tensor& window, int64_t stride, int64_t padding, Tensor* dx, Tensor* dweight,
                                     Tensor* dbias) {
  const ConvShape g = conv_geometry(x, weight, stride, padding);
  RG_CHECK(grad.shape() == pooled.shape() && grad.device() == x.device(), "conv2d_relu_max_pool2d backward",
           "the gradient ", grad.desc(), " does not match the pooled output ", pooled.desc());
  // Both products' FLOPs (the data product only when dx is wanted).
  profiler::OpScope op("conv2d_relu_max_pool2d_backward", conv_flops(g) * (dx ? 2.0 : 1.0));
  const Tensor dy = contiguous(grad.dtype() == x.dtype() ? grad : cast(grad, x.dtype()));
  Tensor d = dx ? empty(x.shape(), x.dtype(), x.device()) : Tensor();
  Tensor dw = dweight ? empty(weight.shape(), x.dtype(), x.device()) : Tensor();
  Tensor db = dbias ? empty({g.O}, x.dtype(), x.device()) : Tensor();
  backend_conv_block_backward(x.device(), x.dtype(), g, contiguous(x).raw_data(), contiguous(weight).raw_data(),
                              contiguous(pooled).raw_data(), contiguous(window).data<uint8_t>(), dy.raw_data(),
                              dx ? d.raw_data() : nullptr, dweight ? dw.raw_data() : nullptr,
                              dbias ? db.raw_data() : nullptr);
  if (dx) *dx = d;
  if (dweight) *dweight = dw;
  if (dbias) *dbias = db;
}

// ---- max_pool2d -------------------------------------------------------------------------------------
namespace {
// The output size of a max pooling, after checking its arguments (stride 0 means stride = kernel).
PoolShape pool_geometry(const Tensor& x, int64_t kernel, int64_t stride, int64_t padding) {
  RG_CHECK(x.defined() && x.dim() == 4 && is_floating(x.dtype()), "max_pool2d",
           "expects a floating (N, C, H, W) tensor, got ", x.desc());
  if (stride == 0) stride = kernel;
  RG_CHECK(kernel >= 1 && stride >= 1 && padding >= 0 && 2 * padding <= kernel, "max_pool2d", "invalid kernel ", kernel,
           ", stride ", stride, ", padding ", padding, " (padding may be at most half the kernel)");
  const int64_t h = x.size(2), w = x.size(3);
  const int64_t oh = (h + 2 * padding - kernel) / stride + 1, ow = (w + 2 * padding - kernel) / stride + 1;
  RG_CHECK(oh > 0 && ow > 0, "max_pool2d", "kernel ", kernel, " is larger than the padded input ", x.desc());
  return {x.size(0), x.size(1), h, w, oh, ow, kernel, stride, padding};
}
}  // namespace

Tensor max_pool2d(const Tensor& x, int64_t kernel, int64_t stride, int64_t padding, Tensor* indices) {
  const PoolShape g = pool_geometry(x, kernel, stride, padding);
  const int64_t n = g.N, c = g.C, h = g.H, w = g.W, oh = g.OH, ow = g.OW;
  stride = g.stride;
  // Reads x; writes y and the i64 indices.
  profiler::OpScope op("max_pool2d", 0,
                       static_cast<double>(x.nbytes()) +
                           static_cast<double>(n * c * oh * ow) * static_cast<double>(x.element_size() + 8));
  const DType ct = compute_dtype(x.dtype());
  Tensor xc = contiguous(x.dtype() == ct ? x : cast(x, ct));
  Tensor y = empty({n, c, oh, ow}, ct, x.device());
  Tensor idx = empty({n, c, oh, ow}, DType::i64, x.device());
  backend_max_pool2d(x.device(), ct, xc.raw_data(), y.raw_data(), idx.data<int64_t>(), n * c, h, w, oh, ow, kernel,
                     stride, padding);
  if (indices) *indices = idx;
  return y.dtype() == x.dtype() ? y : cast(y, x.dtype());
}

Tensor max_pool2d_cudnn(const Tensor& x, int64_t kernel, int64_t stride, int64_t padding) {
  const PoolShape g = pool_geometry(x, kernel, stride, padding);
  RG_CHECK(backend_has_cudnn_pooling(x.device()), "max_pool2d", "the cuDNN path takes CUDA tensors, got ", x.desc());
  const Tensor xc = contiguous(x);
  Tensor y = empty({g.N, g.C, g.OH, g.OW}, x.dtype(), x.device());
  backend_max_pool2d_cudnn(x.device(), x.dtype(), xc.raw_data(), y.raw_data(), g);
  return y;
}

Tensor max_pool2d_cudnn_backward(const Tensor& grad, const Tensor& x, const Tensor& y, int64_t kernel, int64_t stride,
                                 int64_t padding) {
  const PoolShape g = pool_geometry(x, kernel, stride, padding);
  RG_CHECK(backend_has_cudnn_pooling(x.device()) && grad.device() == x.device() && y.device() == x.device() &&
               y.shape() == Shape({g.N, g.C, g.OH, g.OW}) && grad.shape() == y.shape() && y.dtype() == x.dtype(),
           "max_pool2d backward", "expects x, y and grad on one CUDA device with y and grad (", g.N, ", ", g.C, ", ",
           g.OH, ", ", g.OW, "), got x ", x.desc(), ", y ", y.desc(), ", grad ", grad.desc());
  const Tensor xc = contiguous(x), yc = contiguous(y);
  const Tensor gc = contiguous(grad.dtype() == x.dtype() ? grad : cast(grad, x.dtype()));
  Tensor dx = empty(x.shape(), x.dtype(), x.device());
  backend_max_pool2d_cudnn_backward(x.device(), x.dtype(), xc.raw_data(), yc.raw_data(), gc.raw_data(), dx.raw_data(),
                                    g);
  return dx;
}

// Each output's gradient goes to the input position it took its maximum from.
Tensor max_pool2d_backward(const Tensor& grad, const Shape& input_shape, const Tensor& indices) {
  const int64_t planes = input_shape[0] * input_shape[1], hw = input_shape[2] * input_shape[3];
  const int64_t per_plane = indices.size(2) * indices.size(3);
  // Reads the gradient and the indices; writes dx.
  profiler::OpScope op("max_pool2d_backward", 0,
                       static_cast<double>(grad.nbytes() + indices.nbytes()) +
                           static_cast<double>(planes * hw) * static_cast<double>(grad.element_size()));
  const DType ct = compute_dtype(grad.dtype());
  Tensor g = contiguous(grad.dtype() == ct ? grad : cast(grad, ct));
  Tensor dx = empty(input_shape, ct, grad.device());
  if (dx.numel() > 0)
    backend_max_pool2d_backward(grad.device(), ct, g.raw_data(), contiguous(indices).data<int64_t>(), dx.raw_data(),
                                planes, hw, per_plane);
  return dx.dtype() == grad.dtype() ? dx : cast(dx, grad.dtype());
}

}  // namespace ringgrad::native
