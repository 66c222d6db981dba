// Convolution and max pooling kernels on the CPU. The CUDA versions are in core/cuda/conv.cu.
//
// The CPU has no direct convolution: the front end (core/native/conv.cpp) lowers it to one GEMM
// (im2col): every receptive field of the whole batch becomes a column of `cols` (C·KH·KW, N·OH·OW),
// and
//   out (O, N·OH·OW) = weight (O, C·KH·KW) @ cols
// The backward uses the same lowering: dweight = dout @ cols^T, dcols = weight^T @ dout, and col2im
// scatters dcols back onto the input (overlapping windows add up). im2col and col2im are here.
//
// Dims: N batch, C input channels, O output channels, H/W input height/width, KH/KW kernel,
// OH/OW output height/width.
#include <algorithm>

#include "core/cpu/dispatch.h"
#include "core/kernels.h"
#include "core/parallel.h"
#include "core/pool_math.h"

namespace ringgrad::cpu {
namespace {

// ConvShape (core/kernels.h) under the names the lowering loops use.
struct ConvGeometry {
  int64_t n, c, h, w, o, kh, kw, stride, padding, oh, ow;
  int64_t rows() const { return c * kh * kw; }     // of cols
  int64_t columns() const { return n * oh * ow; }  // of cols
};
ConvGeometry geometry(const ConvShape& s) {
  return {s.N, s.C, s.H, s.W, s.O, s.KH, s.KW, s.stride, s.padding, s.OH, s.OW};
}

// x: dense (N, C, H, W) -> cols: dense (C·KH·KW, N·OH·OW)
template <class T>
void im2col_typed(const T* x, T* cols, const ConvGeometry& g) {
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
void col2im_typed(const T* cols, T* dx, const ConvGeometry& g) {
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

// ---- max pooling ---------------------------------------------------------------------------------------
template <class T>
void max_pool_forward(const T* x, T* y, int64_t* argmax, int64_t planes, int64_t h, int64_t w, int64_t oh, int64_t ow,
                      int64_t k, int64_t s, int64_t p) {
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

void im2col(DType dtype, const ConvShape& s, const void* x, void* cols) {
  dispatch_compute("conv2d", dtype, [&](auto tag) {
    using T = decltype(tag);
    im2col_typed(static_cast<const T*>(x), static_cast<T*>(cols), geometry(s));
  });
}

void col2im(DType dtype, const ConvShape& s, const void* cols, void* dx) {
  dispatch_compute("conv2d_backward", dtype, [&](auto tag) {
    using T = decltype(tag);
    col2im_typed(static_cast<const T*>(cols), static_cast<T*>(dx), geometry(s));
  });
}

void max_pool2d(DType dtype, const void* x, void* y, int64_t* indices, int64_t planes, int64_t H, int64_t W, int64_t OH,
                int64_t OW, int64_t kernel, int64_t stride, int64_t padding) {
  dispatch_compute("max_pool2d", dtype, [&](auto tag) {
    using T = decltype(tag);
    max_pool_forward(static_cast<const T*>(x), static_cast<T*>(y), indices, planes, H, W, OH, OW, kernel, stride,
                     padding);
  });
}

// Each output's gradient goes to the input position it took its maximum from.
void max_pool2d_backward(DType dtype, const void* dy, const int64_t* indices, void* dx, int64_t planes,
                         int64_t plane_in, int64_t plane_out) {
  dispatch_compute("max_pool2d_backward", dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* gp = static_cast<const T*>(dy);
    T* dp = static_cast<T*>(dx);
    parallel_for(planes, 1, [&](int64_t begin, int64_t end) {
      for (int64_t pl = begin; pl < end; ++pl) {
        T* plane = dp + pl * plane_in;
        for (int64_t i = 0; i < plane_in; ++i) plane[i] = 0;
        for (int64_t o = 0; o < plane_out; ++o) plane[indices[pl * plane_out + o]] += gp[pl * plane_out + o];
      }
    });
  });
}

}  // namespace ringgrad::cpu
