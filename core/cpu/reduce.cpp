// Row reductions on the CPU: one output per row of a dense (rows, cols) input.
#include <cmath>
#include <limits>
#include <vector>

#include "core/error.h"

#include "core/kernels.h"
#include "core/parallel.h"

namespace ringgrad::cpu {
namespace {

template <class T>
using accumulator_t = RowAccumulator<T>;  // core/kernels.h: the same on every backend

template <class T>
void reduce_typed(RowReduction op, const T* in, void* out_raw, int64_t rows, int64_t cols) {
  const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(cols, 1));
  parallel_for(rows, grain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T* row = in + r * cols;
      if (op == RowReduction::sum || op == RowReduction::mean) {
        // Four running sums: four independent additions in flight instead of one chain.
        accumulator_t<T> part[4] = {0, 0, 0, 0};
        int64_t c = 0;
        for (; c + 4 <= cols; c += 4)
          for (int q = 0; q < 4; ++q) part[q] += load(row[c + q]);
        for (; c < cols; ++c) part[0] += load(row[c]);
        accumulator_t<T> acc = (part[0] + part[1]) + (part[2] + part[3]);
        if (op == RowReduction::mean) acc = cols ? acc / static_cast<accumulator_t<T>>(cols) : acc;
        static_cast<T*>(out_raw)[r] = store_as<T>(static_cast<compute_t<T>>(acc));
      } else {
        // max / argmax: NaN wins (as in PyTorch), first occurrence on ties.
        int64_t best = 0;
        auto best_value = load(row[0]);
        for (int64_t c = 1; c < cols; ++c) {
          const auto v = load(row[c]);
          if constexpr (std::is_floating_point_v<decltype(v)>) {
            if (std::isnan(best_value)) break;
            if (std::isnan(v) || v > best_value) best = c, best_value = v;
          } else {
            if (v > best_value) best = c, best_value = v;
          }
        }
        if (op == RowReduction::max) static_cast<T*>(out_raw)[r] = row[best];
        else static_cast<int64_t*>(out_raw)[r] = best;
      }
    }
  });
}

// Each thread owns a band of columns and walks every row over it: the inner loop is a contiguous
// acc[j] += x[i, j], which vectorises, and reads the input once in its own order.
template <class T>
void reduce_cols_typed(RowReduction op, const T* in, T* out, int64_t rows, int64_t cols) {
  const int64_t grain = std::max<int64_t>(16, 32768 / std::max<int64_t>(rows, 1));
  parallel_for(cols, grain, [&](int64_t begin, int64_t end) {
    std::vector<accumulator_t<T>> acc(static_cast<size_t>(end - begin), 0);
    for (int64_t r = 0; r < rows; ++r) {
      const T* row = in + r * cols + begin;
      for (int64_t j = 0; j < end - begin; ++j) acc[static_cast<size_t>(j)] += load(row[j]);
    }
    for (int64_t j = begin; j < end; ++j) {
      accumulator_t<T> a = acc[static_cast<size_t>(j - begin)];
      if (op == RowReduction::mean && rows) a /= static_cast<accumulator_t<T>>(rows);
      out[j] = store_as<T>(static_cast<compute_t<T>>(a));
    }
  });
}

}  // namespace

void reduce_cols(RowReduction op, DType dtype, const void* in, void* out, int64_t rows, int64_t cols) {
  RG_CHECK(op == RowReduction::sum || op == RowReduction::mean, "reduce", "reduce_cols takes sum or mean");
  dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    reduce_cols_typed<T>(op, static_cast<const T*>(in), static_cast<T*>(out), rows, cols);
  });
}

void reduce_rows(RowReduction op, DType dtype, const void* in, void* out, int64_t rows, int64_t cols) {
  dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    reduce_typed<T>(op, static_cast<const T*>(in), out, rows, cols);
  });
}

}  // namespace ringgrad::cpu
