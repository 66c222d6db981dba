// The CUDA launcher for elementwise math: one grid-stride kernel template that runs the functors of
// core/elementwise.h, the same ones the CPU launcher (core/cpu/) loops over, so the CPU tests cover
// the math this file runs. Operands are described by ElementwiseArgs (operand 0 is the output).
#include <algorithm>
#include <cstdint>
#include <utility>

#include "core/cuda/check.h"
#include "core/cuda/device.h"
#include "core/elementwise.h"
#include "core/kernels.h"

namespace ringgrad::cuda {
namespace {

constexpr int kThreads = 256;
// A grid of this many blocks (1M threads) fills every current GPU several times over; the
// grid-stride loop covers larger tensors.
constexpr int64_t kMaxBlocks = 4096;

// out = store_as<Out>(fn(load(in_1), ..., load(in_n))): loads each input as its compute type (float
// for f16/bf16), applies the functor, rounds once on store.
template <class Out, class Fn, class... In>
struct MapBody {
  static constexpr int kOperands = 1 + sizeof...(In);
  Fn fn;

  __device__ void operator()(void* const* data, const int64_t* offsets) const {
    apply(data, offsets, std::index_sequence_for<In...>{});
  }
  template <size_t... K>
  __device__ void apply(void* const* data, const int64_t* offsets, std::index_sequence<K...>) const {
    static_cast<Out*>(data[0])[offsets[0]] =
        store_as<Out>(fn(load(static_cast<const In*>(data[K + 1])[offsets[K + 1]])...));
  }
};

// where(cond, a, b) selects rather than computes: the chosen element is copied as stored (an f16 NaN
// keeps its payload), as the CPU loop does.
template <class T>
struct WhereBody {
  static constexpr int kOperands = 4;

  __device__ void operator()(void* const* data, const int64_t* offsets) const {
    const uint8_t cond = static_cast<const uint8_t*>(data[1])[offsets[1]];
    static_cast<T*>(data[0])[offsets[0]] =
        WhereOp{}(cond, static_cast<const T*>(data[2])[offsets[2]], static_cast<const T*>(data[3])[offsets[3]]);
  }
};

// The one elementwise kernel. Each thread handles linear indices i, i + stride, ... of the output;
// when every operand is dense (args.contiguous) index i is each operand's offset, otherwise
// operand_offset maps it through the operand's strides (0 on broadcast dims).
template <class Body>
__global__ void elementwise_kernel(ElementwiseArgs args, Body body) {
  constexpr int N = Body::kOperands;
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  int64_t offsets[N];
  if (args.contiguous) {
    for (int64_t i = first; i < args.numel; i += stride) {
      for (int k = 0; k < N; ++k) offsets[k] = i;
      body(args.data, offsets);
    }
  } else {
    for (int64_t i = first; i < args.numel; i += stride) {
      for (int k = 0; k < N; ++k) offsets[k] = operand_offset(args, k, i);
      body(args.data, offsets);
    }
  }
}

template <class Body>
void launch(const char* op, const ElementwiseArgs& args, const Body& body) {
  RG_CHECK(args.noperands == Body::kOperands, op, "kernel expects ", Body::kOperands, " operands, got ",
           args.noperands);
  if (args.numel == 0) return;
  DeviceGuard guard(device_of(args.data[0]));
  const int64_t blocks = std::min((args.numel + kThreads - 1) / kThreads, kMaxBlocks);
  elementwise_kernel<<<static_cast<unsigned>(blocks), kThreads>>>(args, body);
  RG_CUDA_CHECK(cudaGetLastError());
}

// Converts to the output's compute type (double for f64 -> f16/bf16, see cast_compute_t); store_as then
// rounds to f16/bf16 once.
template <class To>
struct CastOp {
  template <class V>
  RG_HOST_DEVICE To operator()(V v) const {
    return static_cast<To>(v);
  }
};

}  // namespace

void unary(UnaryOp op, ScalarArgs s, DType dtype, const ElementwiseArgs& args) {
  dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    visit_unary_op(op, s, [&](auto fn) { launch(unary_op_name(op), args, MapBody<T, decltype(fn), T>{fn}); });
  });
}

void binary(BinaryOp op, DType dtype, const ElementwiseArgs& args) {
  dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    if (is_comparison(op)) {
      visit_compare_op(op,
                       [&](auto fn) { launch(binary_op_name(op), args, MapBody<uint8_t, decltype(fn), T, T>{fn}); });
    } else {
      visit_arith_op(op, [&](auto fn) { launch(binary_op_name(op), args, MapBody<T, decltype(fn), T, T>{fn}); });
    }
  });
}

void where(DType dtype, const ElementwiseArgs& args) {
  dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    launch("where", args, WhereBody<T>{});
  });
}

void cast_copy(DType out_dtype, DType in_dtype, const ElementwiseArgs& args) {
  if (out_dtype == in_dtype && args.contiguous && args.numel > 0) {
    // A plain dense copy: the copy engine does it without a kernel (ordered on the default stream).
    DeviceGuard guard(device_of(args.data[0]));
    RG_CUDA_CHECK(cudaMemcpyAsync(args.data[0], args.data[1], args.numel * dtype_size(out_dtype),
                                  cudaMemcpyDeviceToDevice, /*stream=*/0));
    return;
  }
  dispatch_dtype(out_dtype, [&](auto out_tag) {
    using Out = decltype(out_tag);
    dispatch_dtype(in_dtype, [&](auto in_tag) {
      using In = decltype(in_tag);
      launch("copy", args, MapBody<Out, CastOp<cast_compute_t<Out, In>>, In>{CastOp<cast_compute_t<Out, In>>{}});
    });
  });
}

}  // namespace ringgrad::cuda
