// conv2d and max_pool2d on the CPU.
//
// conv2d lowers the convolution to one GEMM (im2col): every receptive field of the whole batch
// becomes a column of `cols` (C·KH·KW, N·OH·OW), and
//   out (O, N·OH·OW) = weight (O, C·KH·KW) @ cols
// The backward uses the same lowering: dweight = dout @ cols^T, dcols = weight^T @ dout, and col2im
// scatters dcols back onto the input (overlapping windows add up).
//
// Dims: N batch, C input channels, O output channels, H/W input height/width, KH/KW kernel,
// OH/OW output height/width.
#include <algorithm>

#include "core/native/backend.h"
#include "core/native/native.h"
#include "core/pool_math.h"
#include "core/parallel.h"

namespace ringgrad::native {
namespace {

struct ConvGeometry {
  int64_t n, c, h, w, o, kh, kw, stride, padding, oh, ow;
  int64_t rows() const { return c * kh * kw; }       // of cols
  int64_t columns() const { return n * oh * ow; }    // of cols
};

// x: dense (N, C, H, W) -> cols: dense (C·KH·KW, N·OH·OW)
template <class T>
void im2col(const T* x, T* cols, const ConvGeometry& g) {
  parallel_for(g.rows(), 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t c = r / (g.kh * g.kw), ki = (r / g.kw) % g.kh, kj = r % g.kw;
      T* out = cols + r * g.columns();
      for (int64_t n = 0; n < g.n; ++n) {
        const T* plane = x + (n * g.c + c) * g.h * g.w;
        for (int64_t i = 0; i < g.oh; ++i) {
          const int64_t y = i * g.stride - g.padding + ki;
          T* row = out + (n * g.oh + i) * g.ow;
          if (y < 0 || y >= g.h) {
            for (int64_t j = 0; j < g.ow; ++j) row[j] = T(0);
            continue;
          }
          if (g.stride == 1) {  // columns [lo, hi) read x[y, j - p + kj]: zeros, one copy, zeros
            const int64_t lo = std::clamp<int64_t>(g.padding - kj, 0, g.ow);
            const int64_t hi = std::clamp<int64_t>(g.w + g.padding - kj, lo, g.ow);
            const T* src = plane + y * g.w - g.padding + kj;
            for (int64_t j = 0; j < lo; ++j) row[j] = T(0);
            for (int64_t j = lo; j < hi; ++j) row[j] = src[j];
            for (int64_t j = hi; j < g.ow; ++j) row[j] = T(0);
            continue;
          }
          for (int64_t j = 0; j < g.ow; ++j) {
            const int64_t xx = j * g.stride - g.padding + kj;
            row[j] = (xx >= 0 && xx < g.w) ? plane[y * g.w + xx] : T(0);
          }
        }
      }
    }
  });
}

// cols: dense (C·KH·KW, N·OH·OW) -> dx: dense (N, C, H, W), summing overlapping windows.
template <class T>
void col2im(const T* cols, T* dx, const ConvGeometry& g) {
  // Parallel over channels: different channels never write the same dx element.
  parallel_for(g.c, 1, [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c) {
      for (int64_t n = 0; n < g.n; ++n) {
        T* plane = dx + (n * g.c + c) * g.h * g.w;
        for (int64_t p = 0; p < g.h * g.w; ++p) plane[p] = T(0);
      }
      for (int64_t ki = 0; ki < g.kh; ++ki)
        for (int64_t kj = 0; kj < g.kw; ++kj) {
          const T* in = cols + ((c * g.kh + ki) * g.kw + kj) * g.columns();
          for (int64_t n = 0; n < g.n; ++n) {
            T* plane = dx + (n * g.c + c) * g.h * g.w;
            for (int64_t i = 0; i < g.oh; ++i) {
              const int64_t y = i * g.stride - g.padding + ki;
              if (y < 0 || y >= g.h) continue;
              const T* row = in + (n * g.oh + i) * g.ow;
              if (g.stride == 1) {  // the valid columns form one run: a vectorisable add
                const int64_t lo = std::clamp<int64_t>(g.padding - kj, 0, g.ow);
                const int64_t hi = std::clamp<int64_t>(g.w + g.padding - kj, lo, g.ow);
                T* dst = plane + y * g.w - g.padding + kj;
                for (int64_t j = lo; j < hi; ++j) dst[j] += row[j];
                continue;
              }
              for (int64_t j = 0; j < g.ow; ++j) {
                const int64_t xx = j * g.stride - g.padding + kj;
                if (xx >= 0 && xx < g.w) plane[y * g.w + xx] += row[j];
              }
            }
          }
        }
    }
  });
}

ConvGeometry conv_geometry(const Tensor& x, const Tensor& weight, int64_t stride, int64_t padding) {
  RG_CHECK(x.defined() && weight.defined() && x.dim() == 4 && weight.dim() == 4, "conv2d",
           "expects x (N, C, H, W) and weight (O, C, KH, KW), got x ", x.desc(), ", weight ", weight.desc());
  check_same_device_dtype("conv2d", x, weight);
  RG_CHECK(is_floating(x.dtype()), "conv2d", "needs floating-point tensors, got ", x.desc());
  RG_CHECK(x.size(1) == weight.size(1), "conv2d", "input channels differ: x ", x.desc(), " has ", x.size(1),
           ", weight ", weight.desc(), " expects ", weight.size(1));
  RG_CHECK(stride >= 1 && padding >= 0, "conv2d", "stride must be >= 1 and padding >= 0, got stride ", stride,
           ", padding ", padding);
  ConvGeometry g{x.size(0), x.size(1), x.size(2), x.size(3), weight.size(0), weight.size(2), weight.size(3),
                 stride, padding, 0, 0};
  g.oh = (g.h + 2 * padding - g.kh) / stride + 1;
  g.ow = (g.w + 2 * padding - g.kw) / stride + 1;
  RG_CHECK(g.h + 2 * padding >= g.kh && g.w + 2 * padding >= g.kw, "conv2d", "kernel ", g.kh, "x", g.kw,
           " is larger than the padded input ", x.desc(), " (padding ", padding, ")");
  return g;
}

#ifdef RINGGRAD_WITH_CUDA
// On a GPU, cuDNN does the convolution in the tensors' own dtype (core/cuda/conv.cu).
cuda::ConvShape cuda_shape(const ConvGeometry& g) {
  return {g.n, g.c, g.h, g.w, g.o, g.kh, g.kw, g.stride, g.padding, g.oh, g.ow};
}

Tensor cuda_conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const ConvGeometry& g) {
  Tensor xc = contiguous(x), wc = contiguous(weight);
  Tensor out = empty({g.n, g.o, g.oh, g.ow}, x.dtype(), x.device());
  if (out.numel() > 0) cuda::conv2d_forward(x.dtype(), cuda_shape(g), xc.raw_data(), wc.raw_data(), out.raw_data());
  if (bias.defined()) binary_(BinaryOp::add, out, view(bias, {1, g.o, 1, 1}));
  return out;
}

void cuda_conv2d_backward(const Tensor& grad, const Tensor& x, const Tensor& weight, const ConvGeometry& g,
                          Tensor* dx, Tensor* dweight, Tensor* dbias) {
  Tensor dy = contiguous(grad.dtype() == x.dtype() ? grad : cast(grad, x.dtype()));
  if (dbias) *dbias = reduce(ReduceOp::sum, dy, {0, 2, 3}, false);
  if (dweight) {
    *dweight = empty(weight.shape(), weight.dtype(), weight.device());
    if (dy.numel() > 0) cuda::conv2d_backward_filter(x.dtype(), cuda_shape(g), contiguous(x).raw_data(), dy.raw_data(),
                                                      dweight->raw_data());
    else dweight->zero_();
  }
  if (dx) {
    *dx = empty(x.shape(), x.dtype(), x.device());
    if (dy.numel() > 0) cuda::conv2d_backward_data(x.dtype(), cuda_shape(g), dy.raw_data(), contiguous(weight).raw_data(),
                                                    dx->raw_data());
    else dx->zero_();
  }
}
#endif

DType compute_dtype(DType t) { return t == DType::f64 ? DType::f64 : DType::f32; }

// cols for x in compute dtype ct.
Tensor make_cols(const Tensor& x, const ConvGeometry& g, DType ct) {
  Tensor xc = contiguous(x.dtype() == ct ? x : cast(x, ct));
  Tensor cols = empty({g.rows(), g.columns()}, ct, x.device());
  if (ct == DType::f64) im2col(xc.data<double>(), cols.data<double>(), g);
  else im2col(xc.data<float>(), cols.data<float>(), g);
  return cols;
}

}  // namespace

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t stride, int64_t padding,
              Tensor* cols_out) {
  const ConvGeometry g = conv_geometry(x, weight, stride, padding);
  if (bias.defined())
    RG_CHECK(bias.dim() == 1 && bias.size(0) == g.o && bias.dtype() == x.dtype() && bias.device() == x.device(),
             "conv2d", "bias ", bias.desc(), " must be (", g.o, ",) ", dtype_name(x.dtype()), " on ", x.device().str());
#ifdef RINGGRAD_WITH_CUDA
  if (x.device().is_cuda()) return cuda_conv2d(x, weight, bias, g);
#endif
  const DType ct = compute_dtype(x.dtype());
  Tensor cols = make_cols(x, g, ct);
  if (cols_out) *cols_out = cols;
  Tensor w2 = view(contiguous(cast(weight, ct)), {g.o, g.rows()});
  Tensor out = mm(w2, cols);  // (O, N·OH·OW)
  if (bias.defined()) binary_(BinaryOp::add, out, view(cast(bias, ct), {g.o, 1}));
  // (O, N, OH, OW) -> (N, O, OH, OW)
  Tensor nchw = contiguous(permute(view(out, {g.o, g.n, g.oh, g.ow}), {1, 0, 2, 3}));
  return nchw.dtype() == x.dtype() ? nchw : cast(nchw, x.dtype());
}

void conv2d_backward(const Tensor& grad, const Tensor& x, const Tensor& weight, int64_t stride, int64_t padding,
                     Tensor* dx, Tensor* dweight, Tensor* dbias, const Tensor& forward_cols) {
  const ConvGeometry g = conv_geometry(x, weight, stride, padding);
#ifdef RINGGRAD_WITH_CUDA
  if (x.device().is_cuda()) return cuda_conv2d_backward(grad, x, weight, g, dx, dweight, dbias);
#endif
  const DType ct = compute_dtype(x.dtype());
  // dout: (N, O, OH, OW) -> (O, N·OH·OW)
  Tensor dout = view(contiguous(permute(cast(grad, ct), {1, 0, 2, 3})), {g.o, g.columns()});
  if (dbias) *dbias = cast(reduce(ReduceOp::sum, dout, {1}, false), x.dtype());
  if (dweight) {
    Tensor cols = forward_cols.defined() ? forward_cols : make_cols(x, g, ct);
    *dweight = cast(view(mm(dout, transpose(cols, 0, 1)), weight.shape()), weight.dtype());
  }
  if (dx) {
    Tensor w2 = view(contiguous(cast(weight, ct)), {g.o, g.rows()});
    Tensor dcols = mm(transpose(w2, 0, 1), dout);  // (C·KH·KW, N·OH·OW)
    Tensor out = empty(x.shape(), ct, x.device());
    if (ct == DType::f64) col2im(dcols.data<double>(), out.data<double>(), g);
    else col2im(dcols.data<float>(), out.data<float>(), g);
    *dx = out.dtype() == x.dtype() ? out : cast(out, x.dtype());
  }
}

// ---- max_pool2d -------------------------------------------------------------------------------------
namespace {

template <class T>
void max_pool_forward(const T* x, T* y, int64_t* argmax, int64_t planes, int64_t h, int64_t w, int64_t oh,
                      int64_t ow, int64_t k, int64_t s, int64_t p) {
  // The common 2x2 window, stride 2, no padding: the same rule (first maximum wins, a NaN wins)
  // without the general loop's bounds checks -- the general loop made pooling ~20% of a CNN step.
  if (k == 2 && s == 2 && p == 0) {
    parallel_for(planes, 1, [&](int64_t begin, int64_t end) {
      for (int64_t pl = begin; pl < end; ++pl) {
        const T* in = x + pl * h * w;
        for (int64_t i = 0; i < oh; ++i) {
          const T* r0 = in + 2 * i * w;
          const T* r1 = r0 + w;
          T* yr = y + (pl * oh + i) * ow;
          int64_t* ar = argmax + (pl * oh + i) * ow;
          for (int64_t j = 0; j < ow; ++j) {  // selects, no branches: the loop vectorises
            const int64_t at = 2 * i * w + 2 * j;
            const T a = r0[2 * j], b = r0[2 * j + 1], c = r1[2 * j], d = r1[2 * j + 1];
            const bool take_b = b > a || b != b;
            const T ab = take_b ? b : a;
            const int64_t iab = take_b ? at + 1 : at;
            const bool take_c = c > ab || c != c;
            const T abc = take_c ? c : ab;
            const int64_t iabc = take_c ? at + w : iab;
            const bool take_d = d > abc || d != d;
            yr[j] = take_d ? d : abc;
            ar[j] = take_d ? at + w + 1 : iabc;
          }
        }
      }
    });
    return;
  }
  parallel_for(planes, 1, [&](int64_t begin, int64_t end) {
    for (int64_t pl = begin; pl < end; ++pl) {
      const T* in = x + pl * h * w;
      for (int64_t i = 0; i < oh; ++i)
        for (int64_t j = 0; j < ow; ++j)
          max_pool_window(in, h, w, i, j, k, s, p, &y[(pl * oh + i) * ow + j], &argmax[(pl * oh + i) * ow + j]);
    }
  });
}

}  // namespace

namespace {
// The output size of a max pooling, after checking its arguments (stride 0 means stride = kernel).
struct PoolGeometry {
  int64_t n, c, h, w, oh, ow, kernel, stride, padding;
};
PoolGeometry pool_geometry(const Tensor& x, int64_t kernel, int64_t stride, int64_t padding) {
  RG_CHECK(x.defined() && x.dim() == 4 && is_floating(x.dtype()), "max_pool2d",
           "expects a floating (N, C, H, W) tensor, got ", x.desc());
  if (stride == 0) stride = kernel;
  RG_CHECK(kernel >= 1 && stride >= 1 && padding >= 0 && 2 * padding <= kernel, "max_pool2d",
           "invalid kernel ", kernel, ", stride ", stride, ", padding ", padding,
           " (padding may be at most half the kernel)");
  const int64_t h = x.size(2), w = x.size(3);
  const int64_t oh = (h + 2 * padding - kernel) / stride + 1, ow = (w + 2 * padding - kernel) / stride + 1;
  RG_CHECK(oh > 0 && ow > 0, "max_pool2d", "kernel ", kernel, " is larger than the padded input ", x.desc());
  return {x.size(0), x.size(1), h, w, oh, ow, kernel, stride, padding};
}
}  // namespace

Tensor max_pool2d(const Tensor& x, int64_t kernel, int64_t stride, int64_t padding, Tensor* indices) {
  const PoolGeometry g = pool_geometry(x, kernel, stride, padding);
  const int64_t n = g.n, c = g.c, h = g.h, w = g.w, oh = g.oh, ow = g.ow;
  stride = g.stride;
  const DType ct = compute_dtype(x.dtype());
  Tensor xc = contiguous(x.dtype() == ct ? x : cast(x, ct));
  Tensor y = empty({n, c, oh, ow}, ct, x.device());
  Tensor idx = empty({n, c, oh, ow}, DType::i64, x.device());
  if (x.device().is_cuda()) {
#ifdef RINGGRAD_WITH_CUDA
    cuda::max_pool2d(ct, xc.raw_data(), y.raw_data(), idx.data<int64_t>(), n * c, h, w, oh, ow, kernel, stride,
                     padding);
#endif
  } else if (ct == DType::f64)
    max_pool_forward(xc.data<double>(), y.data<double>(), idx.data<int64_t>(), n * c, h, w, oh, ow, kernel, stride, padding);
  else
    max_pool_forward(xc.data<float>(), y.data<float>(), idx.data<int64_t>(), n * c, h, w, oh, ow, kernel, stride, padding);
  if (indices) *indices = idx;
  return y.dtype() == x.dtype() ? y : cast(y, x.dtype());
}

Tensor max_pool2d_cudnn(const Tensor& x, int64_t kernel, int64_t stride, int64_t padding) {
  const PoolGeometry g = pool_geometry(x, kernel, stride, padding);
  RG_CHECK(x.device().is_cuda(), "max_pool2d", "the cuDNN path takes CUDA tensors, got ", x.desc());
  const Tensor xc = contiguous(x);
  Tensor y = empty({g.n, g.c, g.oh, g.ow}, x.dtype(), x.device());
#ifdef RINGGRAD_WITH_CUDA
  cuda::max_pool2d_cudnn(x.dtype(), xc.raw_data(), y.raw_data(),
                         {g.n, g.c, g.h, g.w, g.oh, g.ow, g.kernel, g.stride, g.padding});
#endif
  return y;
}

Tensor max_pool2d_cudnn_backward(const Tensor& grad, const Tensor& x, const Tensor& y, int64_t kernel, int64_t stride,
                                 int64_t padding) {
  const PoolGeometry g = pool_geometry(x, kernel, stride, padding);
  RG_CHECK(x.device().is_cuda() && grad.device() == x.device() && y.device() == x.device() &&
               y.shape() == Shape({g.n, g.c, g.oh, g.ow}) && grad.shape() == y.shape() && y.dtype() == x.dtype(),
           "max_pool2d backward", "expects x, y and grad on one CUDA device with y and grad (", g.n, ", ", g.c, ", ",
           g.oh, ", ", g.ow, "), got x ", x.desc(), ", y ", y.desc(), ", grad ", grad.desc());
  const Tensor xc = contiguous(x), yc = contiguous(y);
  const Tensor gc = contiguous(grad.dtype() == x.dtype() ? grad : cast(grad, x.dtype()));
  Tensor dx = empty(x.shape(), x.dtype(), x.device());
#ifdef RINGGRAD_WITH_CUDA
  cuda::max_pool2d_cudnn_backward(x.dtype(), xc.raw_data(), yc.raw_data(), gc.raw_data(), dx.raw_data(),
                                  {g.n, g.c, g.h, g.w, g.oh, g.ow, g.kernel, g.stride, g.padding});
#endif
  return dx;
}

// Each output's gradient goes to the input position it took its maximum from.
Tensor max_pool2d_backward(const Tensor& grad, const Shape& input_shape, const Tensor& indices) {
  const int64_t planes = input_shape[0] * input_shape[1], hw = input_shape[2] * input_shape[3];
  const int64_t per_plane = indices.size(2) * indices.size(3);
  const DType ct = compute_dtype(grad.dtype());
  Tensor g = contiguous(grad.dtype() == ct ? grad : cast(grad, ct));
  Tensor dx = empty(input_shape, ct, grad.device());
  if (grad.device().is_cuda()) {
#ifdef RINGGRAD_WITH_CUDA
    if (dx.numel() > 0)
      cuda::max_pool2d_backward(ct, g.raw_data(), contiguous(indices).data<int64_t>(), dx.raw_data(), planes, hw,
                                per_plane);
#endif
    return dx.dtype() == grad.dtype() ? dx : cast(dx, grad.dtype());
  }
  const int64_t* idx = indices.data<int64_t>();
  auto route = [&](auto* gp, auto* dp) {
    parallel_for(planes, 1, [&](int64_t begin, int64_t end) {
      for (int64_t pl = begin; pl < end; ++pl) {
        auto* plane = dp + pl * hw;
        for (int64_t i = 0; i < hw; ++i) plane[i] = 0;
        for (int64_t o = 0; o < per_plane; ++o) plane[idx[pl * per_plane + o]] += gp[pl * per_plane + o];
      }
    });
  };
  if (ct == DType::f64) route(g.data<double>(), dx.data<double>());
  else route(g.data<float>(), dx.data<float>());
  return dx.dtype() == grad.dtype() ? dx : cast(dx, grad.dtype());
}

}  // namespace ringgrad::native
