// Row reductions on CUDA: in (rows, cols) dense -> out (rows). The front end (core/native/) moves the
// reduced dims last and makes the input dense, so this is the only shape a kernel sees.
//
// A *group* of threads reduces one row: a warp (32 threads) when rows are short, the whole block
// (256 threads) when they are long. Each thread folds a strided slice of the row into its own state
// (so a warp reads consecutive addresses), then the group combines the states through warp shuffles
// (and shared memory across the warps of a block). Sums accumulate like the CPU's: in double for
// f32/f64, in float for f16/bf16 (and in int64 for integer types).
//
// A few very long rows (a full-tensor sum is rows = 1) would leave most of the GPU idle, so sum and
// mean then split each row into chunks, reduce the chunks into a temporary (rows, chunks) buffer and
// reduce that in a second pass.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "core/cuda/check.h"
#include "core/cuda/device.h"
#include "core/kernels.h"

namespace ringgrad::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarp = 32;
constexpr int64_t kMaxBlocks = 65536;  // the row loop is grid-strided beyond this

// ---- reducers ----------------------------------------------------------------------------------------
template <class T>
using acc_t = RowAccumulator<T>;  // core/kernels.h: the same on every backend

template <class V>
struct MaxIndex {
  V value;
  int64_t index;
};

// A reducer has a State, its identity, accumulate (fold in one element), combine (two states; must be
// associative, the shuffle tree reorders) and store (write the result of task i).
template <class T>
struct SumReducer {
  using State = acc_t<T>;
  double divisor;  // 1 for sum, cols for mean
  __device__ State identity() const { return State(0); }
  __device__ State accumulate(State s, const T& x, int64_t) const { return s + static_cast<State>(load(x)); }
  __device__ State combine(State a, State b) const { return a + b; }
  template <class Out>
  __device__ void store(Out* out, int64_t i, State s) const {
    out[i] = store_as<Out>(divisor == 1.0 ? s : static_cast<State>(s / static_cast<State>(divisor)));
  }
};

// max and argmax: the larger value wins, NaN beats every number (NaN propagates, as in PyTorch), and
// among equal values the smaller index wins, so the answer does not depend on the reduction order.
template <class T>
struct MaxReducer {
  using V = compute_t<T>;
  using State = MaxIndex<V>;
  bool want_index;
  // -inf rather than lowest(), so that a row of -inf still reports a real index.
  __device__ State identity() const {
    using limits = std::numeric_limits<V>;
    return {limits::has_infinity ? -limits::infinity() : limits::lowest(), INT64_MAX};
  }
  __device__ State accumulate(State s, const T& x, int64_t index) const { return combine(s, {load(x), index}); }
  __device__ State combine(State a, State b) const {
    const bool a_nan = a.value != a.value, b_nan = b.value != b.value;
    if (a_nan != b_nan) return a_nan ? a : b;
    if (!a_nan && a.value != b.value) return a.value > b.value ? a : b;
    return a.index <= b.index ? a : b;
  }
  __device__ void store(void* out, int64_t i, State s) const {
    if (want_index) static_cast<int64_t*>(out)[i] = s.index;
    else static_cast<T*>(out)[i] = store_as<T>(s.value);
  }
};

template <class V>
__device__ V shfl_xor(V v, int mask) {
  return __shfl_xor_sync(0xffffffffu, v, mask);
}
template <class V>
__device__ MaxIndex<V> shfl_xor(MaxIndex<V> s, int mask) {
  return {shfl_xor(s.value, mask), shfl_xor(s.index, mask)};
}

// Combines the states of a group of kGroup threads (a warp, or the whole block); every thread of the
// group receives the result. `partials` is shared memory for one state per warp.
template <int kGroup, class Reducer, class State>
__device__ State group_reduce(const Reducer& r, State s, State* partials) {
  for (int mask = kWarp / 2; mask > 0; mask /= 2) s = r.combine(s, shfl_xor(s, mask));
  if constexpr (kGroup == kWarp) {
    return s;
  } else {
    static_assert(kGroup == kThreads, "a group is a warp or the whole block");
    const int warp = threadIdx.x / kWarp;
    if (threadIdx.x % kWarp == 0) partials[warp] = s;
    __syncthreads();
    s = partials[0];
    for (int w = 1; w < kThreads / kWarp; ++w) s = r.combine(s, partials[w]);
    __syncthreads();  // partials is reused by the next row
    return s;
  }
}

// ---- the kernel --------------------------------------------------------------------------------------
// Task t = (row, chunk) reduces in[row, chunk * chunk_cols : (chunk + 1) * chunk_cols] into out[t].
// With chunks == 1 a task is a whole row.
template <int kGroup, class T, class Reducer, class Out>
__global__ void reduce_rows_kernel(Reducer r, const T* in, Out* out, int64_t rows, int64_t cols, int64_t chunks,
                                   int64_t chunk_cols) {
  using State = typename Reducer::State;
  constexpr int kTasksPerBlock = kThreads / kGroup;
  __shared__ State partials[kThreads / kWarp];
  const int lane = threadIdx.x % kGroup;
  const int64_t tasks = rows * chunks;
  // All threads of a block iterate equally often when kGroup == kThreads (one task per block), so
  // the __syncthreads in group_reduce is reached by the whole block.
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * kTasksPerBlock + threadIdx.x / kGroup; t < tasks;
       t += static_cast<int64_t>(gridDim.x) * kTasksPerBlock) {
    const int64_t row = t / chunks;
    const int64_t begin = (t % chunks) * chunk_cols;
    const int64_t end = begin + chunk_cols < cols ? begin + chunk_cols : cols;
    const T* row_in = in + row * cols;
    State s = r.identity();
    for (int64_t c = begin + lane; c < end; c += kGroup) s = r.accumulate(s, row_in[c], c);
    s = group_reduce<kGroup>(r, s, partials);
    if (lane == 0) r.store(out, t, s);
  }
}

template <class T, class Reducer, class Out>
void launch(const Reducer& r, const T* in, Out* out, int64_t rows, int64_t cols, int64_t chunks = 1) {
  const int64_t chunk_cols = (cols + chunks - 1) / chunks;
  const int64_t tasks = rows * chunks;
  // Short rows: a warp per row, 8 rows per block. Long rows: the whole block per row.
  const bool warp_per_task = chunk_cols <= 1024;
  const int64_t tasks_per_block = warp_per_task ? kThreads / kWarp : 1;
  const auto blocks = static_cast<unsigned>(std::min((tasks + tasks_per_block - 1) / tasks_per_block, kMaxBlocks));
  if (warp_per_task) {
    reduce_rows_kernel<kWarp><<<blocks, kThreads>>>(r, in, out, rows, cols, chunks, chunk_cols);
  } else {
    reduce_rows_kernel<kThreads><<<blocks, kThreads>>>(r, in, out, rows, cols, chunks, chunk_cols);
  }
  RG_CUDA_CHECK(cudaGetLastError());
}

// Temporary device memory from the caching allocator, returned when the scope ends. Freeing right
// after the launches is safe because the next user of the block runs on the same stream (see the
// note in allocator.cu).
class ScratchBuffer {
 public:
  ScratchBuffer(int device, size_t nbytes)
      : allocator_(allocator(device)), nbytes_(nbytes), data_(allocator_.allocate(nbytes)) {}
  ~ScratchBuffer() { allocator_.deallocate(data_, nbytes_); }
  ScratchBuffer(const ScratchBuffer&) = delete;
  ScratchBuffer& operator=(const ScratchBuffer&) = delete;
  void* data() const { return data_; }

 private:
  Allocator& allocator_;
  size_t nbytes_;
  void* data_;
};

template <class T>
void sum_rows(bool mean, int device, const T* in, T* out, int64_t rows, int64_t cols) {
  // The mean of an empty row is 0 here, as on the CPU (0 / 1 rather than 0 / 0).
  const double divisor = mean && cols > 0 ? static_cast<double>(cols) : 1.0;
  // Fewer rows than the GPU has warps to spare, each long: split the rows (see the file comment).
  constexpr int64_t kFewRows = 512, kChunkCols = 8192, kMaxChunks = 1024;
  const int64_t chunks = rows < kFewRows ? std::min((cols + kChunkCols - 1) / kChunkCols, kMaxChunks) : 1;
  if (chunks <= 1) {
    launch(SumReducer<T>{divisor}, in, out, rows, cols);
    return;
  }
  using Acc = acc_t<T>;
  ScratchBuffer partial(device, static_cast<size_t>(rows * chunks) * sizeof(Acc));
  auto* partial_sums = static_cast<Acc*>(partial.data());
  launch(SumReducer<T>{1.0}, in, partial_sums, rows, cols, chunks);
  // The partials are summed in acc_t<Acc> (double for every floating Acc): no precision is lost.
  launch(SumReducer<Acc>{divisor}, partial_sums, out, rows, chunks);
}

}  // namespace

void reduce_rows(RowReduction op, DType dtype, const void* in, void* out, int64_t rows, int64_t cols) {
  if (rows == 0) return;
  const bool is_max = op == RowReduction::max || op == RowReduction::argmax;
  RG_CHECK(!is_max || cols > 0, "max", "cannot take the max of an empty row (", rows, " rows of 0 elements)");
  const int device = device_of(out);
  DeviceGuard guard(device);
  dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* typed_in = static_cast<const T*>(in);
    if (is_max) {
      launch(MaxReducer<T>{op == RowReduction::argmax}, typed_in, out, rows, cols);
    } else {
      sum_rows(op == RowReduction::mean, device, typed_in, static_cast<T*>(out), rows, cols);
    }
  });
}

}  // namespace ringgrad::cuda
