// im2col and col2im, one sample at a time (core/cpu/im2col.h): the data movement of the CPU's
// convolutions, plain (core/cpu/conv.cpp) and fused (core/cpu/conv_block.cpp).
#include "core/cpu/im2col.h"

#include <cstring>
#include <type_traits>

#include "core/cpu/avx512_intrinsics.h"
#include "core/cpu_isa.h"

namespace ringgrad::cpu {
namespace {

#if defined(__x86_64__)
// Note [im2col through a padded copy]
// -----------------------------------
// Stride-1 im2col and col2im of floats with AVX-512 go through a zero-padded copy of the sample's
// planes: (C, H + 2p) rows of W + 2p + 16 floats, in a buffer of the calling thread. Every row of
// every block r = (c, ki, kj) of cols is then a run of the copy, moved 16 columns at a time by plain
// loads and stores. The masked loads and stores this replaces (lanes in the padding or past a row)
// crossed a cache line most of the time -- W2's rows are 14 and 28 wide -- and ran several times
// slower than plain ones on the machines here: im2col and col2im were ~20% of a W2 step.
//   im2col: a store runs up to 15 lanes past its row into the next, which that row's own store
//           then overwrites (cols buffers have 16 elements of slack, kColsSlack).
//   col2im: each cols row, its lanes past the row zeroed in registers, is added into the copy
//           (zeroed first); the copy's interior is then dx.
// The same copies, and onto each element of dx the same additions in the same order (plus +0.0
// for lanes past a row, which leaves a sum that started from +0.0 unchanged), as the scalar loops:
// bit-identical.
struct PaddedPlanes {
  int64_t rows, stride;  // rows per plane, floats per row
};
PaddedPlanes padded_shape(const ConvGeometry& g) { return {g.h + 2 * g.padding, g.w + 2 * g.padding + 16}; }

// A padded copy of the calling thread's: `zeroed`, or else left as the last call with the same
// geometry left it (im2col's copy: its padding is never written, so only the interior is rewritten
// while one convolution's samples follow each other).
float* padded_buffer(std::vector<float>& buffer, ConvGeometry& last, const ConvGeometry& g, bool zeroed) {
  const PaddedPlanes s = padded_shape(g);
  const auto size = static_cast<size_t>(g.c * s.rows * s.stride);
  const bool same = last.c == g.c && last.h == g.h && last.w == g.w && last.padding == g.padding;
  if (buffer.size() < size) buffer.resize(size);
  if (zeroed || !same) std::fill(buffer.begin(), buffer.begin() + static_cast<std::ptrdiff_t>(size), 0.0f);
  last = g;
  return buffer.data();
}

__attribute__((target("avx512f"))) void im2col_padded_avx512(const float* x, float* cols, const ConvGeometry& g) {
  thread_local std::vector<float> buffer;
  thread_local ConvGeometry last{};
  const PaddedPlanes s = padded_shape(g);
  float* copy = padded_buffer(buffer, last, g, /*zeroed=*/false);
  // x's rows into the interior, 16 columns at a time: the loads may run up to 15 floats past a row
  // (zeroed in registers, so the stores past it write the padding's zeros), except near the
  // sample's end, where the row is copied exactly.
  const int64_t sample = g.c * g.h * g.w, whole = (g.w + 15) / 16 * 16;
  for (int64_t c = 0; c < g.c; ++c)
    for (int64_t y = 0; y < g.h; ++y) {
      const float* from = x + (c * g.h + y) * g.w;
      float* to = copy + (c * s.rows + y + g.padding) * s.stride + g.padding;
      if (sample - (c * g.h + y) * g.w < whole) {
        std::memcpy(to, from, static_cast<size_t>(g.w) * sizeof(float));
        continue;
      }
      for (int64_t j = 0; j < g.w; j += 16) {
        const __mmask16 row_lanes = g.w - j >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << (g.w - j)) - 1);
        _mm512_storeu_ps(to + j, _mm512_maskz_mov_ps(row_lanes, _mm512_loadu_ps(from + j)));
      }
    }
  for (int64_t r = 0; r < g.rows(); ++r) {
    const int64_t c = r / (g.kh * g.kw), ki = (r / g.kw) % g.kh, kj = r % g.kw;
    const float* from = copy + (c * s.rows + ki) * s.stride + kj;
    float* out = cols + r * g.oh * g.ow;
    for (int64_t i = 0; i < g.oh; ++i)
      for (int64_t j = 0; j < g.ow; j += 16)
        _mm512_storeu_ps(out + i * g.ow + j, _mm512_loadu_ps(from + i * s.stride + j));
  }
}

__attribute__((target("avx512f"))) void col2im_padded_avx512(const float* cols, float* dx, const ConvGeometry& g) {
  thread_local std::vector<float> buffer;
  thread_local ConvGeometry last{};
  const PaddedPlanes s = padded_shape(g);
  float* copy = padded_buffer(buffer, last, g, /*zeroed=*/true);
  for (int64_t r = 0; r < g.rows(); ++r) {
    const int64_t c = r / (g.kh * g.kw), ki = (r / g.kw) % g.kh, kj = r % g.kw;
    float* to = copy + (c * s.rows + ki) * s.stride + kj;
    const float* in = cols + r * g.oh * g.ow;
    for (int64_t i = 0; i < g.oh; ++i)
      for (int64_t j = 0; j < g.ow; j += 16) {
        const __mmask16 row_lanes = g.ow - j >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << (g.ow - j)) - 1);
        const __m512 v = _mm512_maskz_mov_ps(row_lanes, _mm512_loadu_ps(in + i * g.ow + j));
        float* at = to + i * s.stride + j;
        _mm512_storeu_ps(at, _mm512_add_ps(_mm512_loadu_ps(at), v));
      }
  }
  for (int64_t c = 0; c < g.c; ++c)
    for (int64_t y = 0; y < g.h; ++y)
      std::memcpy(dx + (c * g.h + y) * g.w, copy + (c * s.rows + y + g.padding) * s.stride + g.padding,
                  static_cast<size_t>(g.w) * sizeof(float));
}
#endif

// Whether a stride-1 im2col / col2im of T goes through the padded copy above.
template <class T>
bool through_padded_copy(const ConvGeometry& g) {
#if defined(__x86_64__)
  if constexpr (std::is_same_v<T, float>) return g.stride == 1 && cpu_isa() == CpuIsa::avx512;
#endif
  (void)g;
  return false;
}

}  // namespace

template <class T>
void im2col_sample(const T* x, T* cols, const ConvGeometry& g) {
#if defined(__x86_64__)
  if constexpr (std::is_same_v<T, float>) {
    if (through_padded_copy<T>(g)) return im2col_padded_avx512(x, cols, g);
  }
#endif
  for (int64_t r = 0; r < g.rows(); ++r) {
    const int64_t c = r / (g.kh * g.kw), ki = (r / g.kw) % g.kh, kj = r % g.kw;
    const T* plane = x + c * g.h * g.w;
    T* out = cols + r * g.oh * g.ow;
    for (int64_t i = 0; i < g.oh; ++i) {
      const int64_t y = i * g.stride - g.padding + ki;
      T* row = out + i * g.ow;
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

template <class T>
void col2im_sample(const T* cols, T* dx, const ConvGeometry& g) {
#if defined(__x86_64__)
  if constexpr (std::is_same_v<T, float>) {
    if (through_padded_copy<T>(g)) return col2im_padded_avx512(cols, dx, g);
  }
#endif
  std::fill(dx, dx + g.c * g.h * g.w, T(0));
  for (int64_t r = 0; r < g.rows(); ++r) {
    const int64_t c = r / (g.kh * g.kw), ki = (r / g.kw) % g.kh, kj = r % g.kw;
    const T* in = cols + r * g.oh * g.ow;
    T* plane = dx + c * g.h * g.w;
    for (int64_t i = 0; i < g.oh; ++i) {
      const int64_t y = i * g.stride - g.padding + ki;
      if (y < 0 || y >= g.h) continue;
      const T* row = in + i * g.ow;
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

template void im2col_sample<float>(const float*, float*, const ConvGeometry&);
template void im2col_sample<double>(const double*, double*, const ConvGeometry&);
template void col2im_sample<float>(const float*, float*, const ConvGeometry&);
template void col2im_sample<double>(const double*, double*, const ConvGeometry&);

}  // namespace ringgrad::cpu
