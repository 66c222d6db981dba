// The per-row pieces of the CPU row kernels (internal to core/cpu/), shared by the row kernels
// (core/cpu/rows.cpp) and attention, which runs them on row blocks of each head (core/cpu/attention.cpp).
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>

#include "core/elementwise.h"
#include "core/kernels.h"
#include "core/random.h"

namespace ringgrad::cpu {

// Note [Sums in lanes]: a floating-point sum kept in one accumulator is a dependency chain that GCC
// may not reorder (no -ffast-math), so it runs unvectorised at one add per add-latency. Eight
// partial sums (maxima), combined in a fixed order at the end, vectorise. The result may differ from
// the serial sum in the last bits, the same on every call.
constexpr int kLanes = 8;

template <class T, class Term>
T sum_lanes(int64_t n, Term term) {
  T acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] += term(i + l);
  T total = 0;
  for (; i < n; ++i) total += term(i);
  for (int l = 0; l < kLanes; ++l) total += acc[l];
  return total;
}

template <class T, class Term>
T max_lanes(int64_t n, Term term) {
  T acc[kLanes];
  for (T& a : acc) a = -std::numeric_limits<T>::infinity();
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] = std::max(acc[l], term(i + l));
  T best = -std::numeric_limits<T>::infinity();
  for (; i < n; ++i) best = std::max(best, term(i));
  for (int l = 0; l < kLanes; ++l) best = std::max(best, acc[l]);
  return best;
}

// One row of a causal softmax: query position i sees keys 0..i. y[j] = softmax_j<=i(k s[j]), y[j > i]
// = 0. y may be s (in place).
template <class T>
void causal_softmax_row(const T* s, T* y, int64_t i, int64_t n, T k) {
  // Note [Sums in lanes] for the max and the sum; the exponentials vectorise as they are.
  const T max = max_lanes<T>(i + 1, [&](int64_t j) { return k * s[j]; });
  for (int64_t j = 0; j <= i; ++j) y[j] = exp_of(k * s[j] - max);
  const T inv = T(1) / sum_lanes<T>(i + 1, [&](int64_t j) { return y[j]; });
  for (int64_t j = 0; j <= i; ++j) y[j] *= inv;
  for (int64_t j = i + 1; j < n; ++j) y[j] = 0;
}

// Its backward: ds[j] = k y[j] (g[j] - sum_l g[l] y[l]); masked entries have y = 0, so ds = 0 there.
// ds may be g (in place).
template <class T>
void causal_softmax_backward_row(const T* g, const T* y, T* ds, int64_t i, int64_t n, T k) {
  const T dot = sum_lanes<T>(i + 1, [&](int64_t j) { return g[j] * y[j]; });  // Note [Sums in lanes]
  for (int64_t j = 0; j <= i; ++j) ds[j] = k * y[j] * (g[j] - dot);
  for (int64_t j = i + 1; j < n; ++j) ds[j] = 0;
}

// out[j] = row[j] * keep(e0 + j) / (1 - rate) for j < count; row may be out. keep is dropout_keep of
// core/random.h, one Philox evaluation per four elements.
template <class T>
void apply_dropout(const T* row, T* out, int64_t count, uint64_t e0, const AttentionDropout& d) {
  const T scale = static_cast<T>(1.0 / (1.0 - d.rate));
  const float rate = static_cast<float>(d.rate);
  uint64_t counter = ~uint64_t(0);
  Philox4x32 words{};
  for (int64_t j = 0; j < count; ++j) {
    const uint64_t e = e0 + static_cast<uint64_t>(j);
    if (d.offset + e / 4 != counter) counter = d.offset + e / 4, words = philox4x32(counter, 0, d.seed);
    out[j] = uint_to_unit_float(words.v[e % 4]) >= rate ? row[j] * scale : T(0);
  }
}

}  // namespace ringgrad::cpu
