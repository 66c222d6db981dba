// The CPU launcher's loop skeleton: walks the elements described by an ElementwiseArgs row by row
// (the innermost dim is the row), splitting rows across the compute thread pool. A dense problem is
// one long row cut into chunks, which the compiler vectorises.
#pragma once

#include <algorithm>

#include "core/elementwise.h"
#include "core/parallel.h"

namespace ringgrad::cpu {

// Elements per chunk handed to a thread: big enough that scheduling costs are noise.
constexpr int64_t kElementwiseGrain = 32768;

// row(offsets, count, strides): offsets[k] is operand k's element offset of the row's first element,
// strides[k] its stride along the row.
template <int N, class RowFn>
void for_each_row(const ElementwiseArgs& args, RowFn&& row) {
  if (args.numel == 0) return;
  if (args.contiguous) {
    parallel_for(args.numel, kElementwiseGrain, [&](int64_t begin, int64_t end) {
      int64_t offsets[N], strides[N];
      for (int k = 0; k < N; ++k) offsets[k] = begin, strides[k] = 1;
      row(offsets, end - begin, strides);
    });
    return;
  }
  const int last = args.ndim - 1;
  const int64_t inner = args.shape[last];
  const int64_t rows = args.numel / inner;
  int64_t strides[N];
  for (int k = 0; k < N; ++k) strides[k] = args.strides[k][last];
  parallel_for(rows, std::max<int64_t>(1, kElementwiseGrain / inner), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      int64_t offsets[N] = {};
      int64_t rest = r;
      for (int d = last - 1; d >= 0; --d) {
        const int64_t idx = rest % args.shape[d];
        rest /= args.shape[d];
        for (int k = 0; k < N; ++k) offsets[k] += idx * args.strides[k][d];
      }
      row(offsets, inner, strides);
    }
  });
}

}  // namespace ringgrad::cpu
