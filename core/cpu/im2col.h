// The lowering of a convolution to GEMMs on the CPU, one sample at a time (Note [Convolution one
// sample at a time] in core/cpu/conv.cpp), shared by the plain convolution kernels there and by the
// fused convolution block (core/cpu/conv_block.cpp). Internal to core/cpu/.
//
// Dims: N batch, C input channels, O output channels, H/W input height/width, KH/KW kernel,
// OH/OW output height/width.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/kernels.h"
#include "core/parallel.h"

namespace ringgrad::cpu {

// ConvShape (core/kernels.h) under the names the lowering loops use.
struct ConvGeometry {
  int64_t n, c, h, w, o, kh, kw, stride, padding, oh, ow;
  int64_t rows() const { return c * kh * kw; }     // of cols
  int64_t columns() const { return n * oh * ow; }  // of cols
};
inline ConvGeometry geometry(const ConvShape& s) {
  return {s.N, s.C, s.H, s.W, s.O, s.KH, s.KW, s.stride, s.padding, s.OH, s.OW};
}

// Elements a cols buffer needs past C·KH·KW x OH·OW: im2col's whole-vector stores run up to 15
// past a row (Note [im2col through a padded copy] in core/cpu/im2col.cpp).
constexpr int64_t kColsSlack = 16;

// One sample: x: dense (C, H, W) -> cols: dense (C·KH·KW, OH·OW), a buffer with kColsSlack
// elements of slack. For float and double.
template <class T>
void im2col_sample(const T* x, T* cols, const ConvGeometry& g);

// One sample: cols: dense (C·KH·KW, OH·OW), with kColsSlack elements of slack -> dx: dense (C, H, W),
// overwritten, summing overlapping windows. For float and double.
template <class T>
void col2im_sample(const T* cols, T* dx, const ConvGeometry& g);

// How many parts the samples are split into: one per pool thread, at most one per sample.
inline int64_t sample_parts(int64_t samples) { return std::max<int64_t>(1, std::min<int64_t>(num_threads(), samples)); }

// Calls fn(n, part, first, cols) for every sample n, the samples split into `parts` parts of
// consecutive samples, one per pool thread (Note [Convolution one sample at a time]); first: n is
// its part's first sample; cols: the calling thread's buffer of C·KH·KW x OH·OW elements (and
// kColsSlack), grown once.
template <class T, class Fn>
void for_each_sample(const ConvGeometry& g, int64_t parts, Fn&& fn) {
  parallel_for(parts, 1, [&](int64_t lo, int64_t hi) {
    thread_local std::vector<T> buffer;
    const int64_t size = g.rows() * g.oh * g.ow + kColsSlack;
    if (static_cast<int64_t>(buffer.size()) < size) buffer.resize(size);
    for (int64_t part = lo; part < hi; ++part) {
      const int64_t begin = g.n * part / parts, end = g.n * (part + 1) / parts;
      for (int64_t n = begin; n < end; ++n) fn(n, part, n == begin, buffer.data());
    }
  });
}

}  // namespace ringgrad::cpu
