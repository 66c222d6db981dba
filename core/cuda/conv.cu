// Convolution through cuDNN, and max pooling, on CUDA. The front end (core/native/conv.cpp) checks
// shapes and computes the output size; the CPU's twins of these kernels (core/cpu/conv.cpp) lower the
// convolution to im2col + GEMM, one sample at a time.
//
// cuDNN (its "legacy" descriptor API, still in cuDNN 9): a tensor descriptor for x and y, a filter
// descriptor for w, a convolution descriptor for padding and stride, and per direction an algorithm
// picked by cuDNN's heuristics (the *_v7 queries, which do not run anything) with the workspace it
// asks for. Choices are cached per shape, since a training loop repeats the same few.
//
// Precision: f32 convolutions use FMA kernels only (CUDNN_FMA_MATH), the same stance as the cuBLAS
// GEMM (no silent TF32; set_allow_tf32(true) permits it); f16 / bf16 accumulate in f32 on tensor
// cores; f64 is f64.
//
// Note [Max pooling on cuDNN]: autograd's max_pool2d on a GPU runs cuDNN's max pooling, which
// returns no argmax: its backward finds each window's maximum again from x and y, so the node saves
// x and y (the CPU saves the argmax positions). Both are in the tensor's own dtype -- a maximum is
// exact in any dtype, so y equals an element of x and the backward finds it; an f16 y rounded from
// an f32 one would not. NaN propagates forward (CUDNN_PROPAGATE_NAN), as on the CPU, where NaN wins
// a window. Two differences in the backward: on ties cuDNN's (deterministic) backward picks its own
// element where the CPU picks the first (after a ReLU, tied zeros get no gradient either way), and a
// window whose maximum is NaN likely sends its gradient nowhere (NaN equals no element of x) where
// the CPU sends it to the NaN. bf16 -- not confirmed in cuDNN's legacy pooling -- and
// native::max_pool2d with an `indices` output keep the own kernel below, over the CPU's window
// function.
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include "core/cuda/device.h"
#include "core/cuda/launch.h"
#include "core/kernels.h"
#include "core/pool_math.h"

namespace ringgrad::cuda {
namespace {

using namespace detail;

// One cuDNN handle per device, created on first use and kept (deliberately leaked, like the cuBLAS
// handles in gemm.cu). Work goes to the legacy default stream, like every kernel of this backend.
cudnnHandle_t cudnn_handle(int device) {
  static std::mutex mutex;
  static auto* handles = new std::vector<cudnnHandle_t>(device_count(), nullptr);
  std::lock_guard<std::mutex> lock(mutex);
  cudnnHandle_t& handle = handles->at(device);
  if (handle == nullptr) RG_CUDNN_CHECK(cudnnCreate(&handle));
  return handle;
}

struct CudnnTypes {
  cudnnDataType_t data, compute;
  cudnnMathType_t math;
};
CudnnTypes cudnn_types(DType dtype) {
  switch (dtype) {
    case DType::f32:  // TF32 tensor cores only after set_allow_tf32(true) (core/device.h)
      return {CUDNN_DATA_FLOAT, CUDNN_DATA_FLOAT, allow_tf32() ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH};
    case DType::f64: return {CUDNN_DATA_DOUBLE, CUDNN_DATA_DOUBLE, CUDNN_FMA_MATH};
    case DType::f16: return {CUDNN_DATA_HALF, CUDNN_DATA_FLOAT, CUDNN_TENSOR_OP_MATH};
    case DType::bf16: return {CUDNN_DATA_BFLOAT16, CUDNN_DATA_FLOAT, CUDNN_TENSOR_OP_MATH};
    default: RG_FAIL("conv2d", "no cuDNN convolution for dtype ", dtype_name(dtype));
  }
}

int to_int(int64_t v) {
  RG_CHECK(v >= 0 && v <= INT32_MAX, "conv2d", "size ", v, " does not fit cuDNN's 32-bit int");
  return static_cast<int>(v);
}

// The descriptors of one convolution, destroyed with it.
class ConvDescriptors {
 public:
  ConvDescriptors(DType dtype, const ConvShape& s) : types_(cudnn_types(dtype)) {
    RG_CUDNN_CHECK(cudnnCreateTensorDescriptor(&x));
    RG_CUDNN_CHECK(cudnnCreateTensorDescriptor(&y));
    RG_CUDNN_CHECK(cudnnCreateFilterDescriptor(&w));
    RG_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&conv));
    RG_CUDNN_CHECK(cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NCHW, types_.data, to_int(s.N), to_int(s.C), to_int(s.H),
                                              to_int(s.W)));
    RG_CUDNN_CHECK(cudnnSetTensor4dDescriptor(y, CUDNN_TENSOR_NCHW, types_.data, to_int(s.N), to_int(s.O), to_int(s.OH),
                                              to_int(s.OW)));
    RG_CUDNN_CHECK(cudnnSetFilter4dDescriptor(w, types_.data, CUDNN_TENSOR_NCHW, to_int(s.O), to_int(s.C), to_int(s.KH),
                                              to_int(s.KW)));
    RG_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(conv, to_int(s.padding), to_int(s.padding), to_int(s.stride),
                                                   to_int(s.stride), 1, 1, CUDNN_CROSS_CORRELATION, types_.compute));
    RG_CUDNN_CHECK(cudnnSetConvolutionMathType(conv, types_.math));
  }
  ~ConvDescriptors() {
    cudnnDestroyConvolutionDescriptor(conv);
    cudnnDestroyFilterDescriptor(w);
    cudnnDestroyTensorDescriptor(y);
    cudnnDestroyTensorDescriptor(x);
  }
  ConvDescriptors(const ConvDescriptors&) = delete;
  ConvDescriptors& operator=(const ConvDescriptors&) = delete;

  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  cudnnMathType_t math() const { return types_.math; }

 private:
  CudnnTypes types_;
};

// alpha / beta live in host memory, as double for f64 data and float otherwise (cuDNN's rule).
struct Scaling {
  explicit Scaling(DType dtype) : is_double(dtype == DType::f64) {}
  const void* one() const { return is_double ? static_cast<const void*>(&d1) : &f1; }
  const void* zero() const { return is_double ? static_cast<const void*>(&d0) : &f0; }
  bool is_double;
  float f1 = 1, f0 = 0;
  double d1 = 1, d0 = 0;
};

enum class Direction { forward, backward_data, backward_filter };
using AlgoKey = std::tuple<int, int, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t>;

// An algorithm and the math type it was ranked for (the descriptor must carry that math type).
struct AlgoChoice {
  int algo;
  cudnnMathType_t math;
};

// The algorithm for one direction and shape: the first that cuDNN's heuristics rank as supported
// with the math type asked for (FMA for f32: no TF32), else the first supported at all. The
// descriptor is set to the chosen algorithm's math type.
AlgoChoice choose_algorithm(Direction direction, int device, DType dtype, const ConvShape& s,
                            const ConvDescriptors& d) {
  static std::mutex mutex;
  static std::map<AlgoKey, AlgoChoice> cache;
  const AlgoKey key{static_cast<int>(direction) + (d.math() == CUDNN_DEFAULT_MATH ? 8 : 0),
                    device * 16 + static_cast<int>(dtype),
                    s.N,
                    s.C,
                    s.H,
                    s.W,
                    s.O,
                    s.KH,
                    s.KW,
                    s.stride,
                    s.padding};
  auto apply = [&](const AlgoChoice& choice) {
    RG_CUDNN_CHECK(cudnnSetConvolutionMathType(d.conv, choice.math));
    return choice;
  };
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (auto it = cache.find(key); it != cache.end()) return apply(it->second);
  }
  cudnnHandle_t handle = cudnn_handle(device);
  constexpr int kAsk = 8;
  int returned = 0, algo = -1;
  cudnnMathType_t math = d.math();
  auto first_ok = [&](const auto* perf) {
    for (int pass = 0; pass < 2 && algo < 0; ++pass)  // pass 0: the math type asked for; pass 1: any
      for (int i = 0; i < returned && algo < 0; ++i)
        if (perf[i].status == CUDNN_STATUS_SUCCESS && (pass == 1 || perf[i].mathType == d.math())) {
          algo = static_cast<int>(perf[i].algo);
          math = perf[i].mathType;
        }
  };
  switch (direction) {
    case Direction::forward: {
      cudnnConvolutionFwdAlgoPerf_t perf[kAsk];
      RG_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(handle, d.x, d.w, d.conv, d.y, kAsk, &returned, perf));
      first_ok(perf);
      break;
    }
    case Direction::backward_data: {
      cudnnConvolutionBwdDataAlgoPerf_t perf[kAsk];
      RG_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(handle, d.w, d.y, d.conv, d.x, kAsk, &returned, perf));
      first_ok(perf);
      break;
    }
    case Direction::backward_filter: {
      cudnnConvolutionBwdFilterAlgoPerf_t perf[kAsk];
      RG_CUDNN_CHECK(
          cudnnGetConvolutionBackwardFilterAlgorithm_v7(handle, d.x, d.y, d.conv, d.w, kAsk, &returned, perf));
      first_ok(perf);
      break;
    }
  }
  RG_CHECK(algo >= 0, "conv2d", "cuDNN offers no algorithm for x (", s.N, ", ", s.C, ", ", s.H, ", ", s.W,
           "), weight (", s.O, ", ", s.C, ", ", s.KH, ", ", s.KW, "), stride ", s.stride, ", padding ", s.padding,
           ", dtype ", dtype_name(dtype), " on cuda:", device);
  const AlgoChoice choice{algo, math};
  {
    std::lock_guard<std::mutex> lock(mutex);
    cache[key] = choice;
  }
  return apply(choice);
}

// What every direction of a convolution starts with: the output's device made current, the
// descriptors, the algorithm (and its math type) chosen for this shape, the handle, alpha / beta.
struct ConvCall {
  ConvCall(Direction direction, DType dtype, const ConvShape& s, const void* out)
      : device(device_of(out)),
        guard(device),
        d(dtype, s),
        algo(choose_algorithm(direction, device, dtype, s, d).algo),
        handle(cudnn_handle(device)),
        scaling(dtype) {}
  const int device;
  DeviceGuard guard;
  ConvDescriptors d;
  const int algo;
  const cudnnHandle_t handle;
  const Scaling scaling;
};

// The descriptors of one cuDNN max pooling, destroyed with it.
class PoolDescriptors {
 public:
  PoolDescriptors(DType dtype, int64_t planes_n, int64_t c, int64_t h, int64_t w, int64_t oh, int64_t ow,
                  int64_t kernel, int64_t stride, int64_t padding) {
    const cudnnDataType_t data = cudnn_types(dtype).data;
    RG_CUDNN_CHECK(cudnnCreateTensorDescriptor(&x));
    RG_CUDNN_CHECK(cudnnCreateTensorDescriptor(&y));
    RG_CUDNN_CHECK(cudnnCreatePoolingDescriptor(&pool));
    RG_CUDNN_CHECK(
        cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NCHW, data, to_int(planes_n), to_int(c), to_int(h), to_int(w)));
    RG_CUDNN_CHECK(
        cudnnSetTensor4dDescriptor(y, CUDNN_TENSOR_NCHW, data, to_int(planes_n), to_int(c), to_int(oh), to_int(ow)));
    RG_CUDNN_CHECK(cudnnSetPooling2dDescriptor(pool, CUDNN_POOLING_MAX_DETERMINISTIC, CUDNN_PROPAGATE_NAN,
                                               to_int(kernel), to_int(kernel), to_int(padding), to_int(padding),
                                               to_int(stride), to_int(stride)));
  }
  ~PoolDescriptors() {
    cudnnDestroyPoolingDescriptor(pool);
    cudnnDestroyTensorDescriptor(y);
    cudnnDestroyTensorDescriptor(x);
  }
  PoolDescriptors(const PoolDescriptors&) = delete;
  PoolDescriptors& operator=(const PoolDescriptors&) = delete;

  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnPoolingDescriptor_t pool = nullptr;
};

// ---- max pooling: one thread per output --------------------------------------------------------------
// The CPU's rule, from the same function (core/pool_math.h).
template <class T>
__global__ void max_pool_kernel(const T* x, T* y, int64_t* argmax, int64_t planes, int64_t h, int64_t w, int64_t oh,
                                int64_t ow, int64_t k, int64_t s, int64_t p) {
  const int64_t total = planes * oh * ow;
  for (int64_t o = first_thread(); o < total; o += thread_stride()) {
    const int64_t j = o % ow, i = (o / ow) % oh, plane = o / (oh * ow);
    max_pool_window(x + plane * h * w, h, w, i, j, k, s, p, &y[o], &argmax[o]);
  }
}

// dx zeroed first; windows may overlap (stride < kernel), so several outputs can add into one input.
template <class T>
__global__ void max_pool_backward_kernel(const T* dy, const int64_t* argmax, T* dx, int64_t planes, int64_t plane_in,
                                         int64_t plane_out) {
  const int64_t total = planes * plane_out;
  for (int64_t o = first_thread(); o < total; o += thread_stride())
    atomicAdd(dx + (o / plane_out) * plane_in + argmax[o], dy[o]);
}

}  // namespace

void conv2d_forward(DType dtype, const ConvShape& s, const void* x, const void* w, void* y) {
  const ConvCall c(Direction::forward, dtype, s, y);
  const auto algo = static_cast<cudnnConvolutionFwdAlgo_t>(c.algo);
  size_t bytes = 0;
  RG_CUDNN_CHECK(cudnnGetConvolutionForwardWorkspaceSize(c.handle, c.d.x, c.d.w, c.d.conv, c.d.y, algo, &bytes));
  Scratch workspace(allocator(c.device), bytes);
  RG_CUDNN_CHECK(cudnnConvolutionForward(c.handle, c.scaling.one(), c.d.x, x, c.d.w, w, c.d.conv, algo,
                                         workspace.as<void>(), bytes, c.scaling.zero(), c.d.y, y));
}

void conv2d_backward_data(DType dtype, const ConvShape& s, const void* dy, const void* w, void* dx) {
  const ConvCall c(Direction::backward_data, dtype, s, dx);
  const auto algo = static_cast<cudnnConvolutionBwdDataAlgo_t>(c.algo);
  size_t bytes = 0;
  RG_CUDNN_CHECK(cudnnGetConvolutionBackwardDataWorkspaceSize(c.handle, c.d.w, c.d.y, c.d.conv, c.d.x, algo, &bytes));
  Scratch workspace(allocator(c.device), bytes);
  RG_CUDNN_CHECK(cudnnConvolutionBackwardData(c.handle, c.scaling.one(), c.d.w, w, c.d.y, dy, c.d.conv, algo,
                                              workspace.as<void>(), bytes, c.scaling.zero(), c.d.x, dx));
}

void conv2d_backward_filter(DType dtype, const ConvShape& s, const void* x, const void* dy, void* dw) {
  const ConvCall c(Direction::backward_filter, dtype, s, dw);
  const auto algo = static_cast<cudnnConvolutionBwdFilterAlgo_t>(c.algo);
  size_t bytes = 0;
  RG_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterWorkspaceSize(c.handle, c.d.x, c.d.y, c.d.conv, c.d.w, algo, &bytes));
  Scratch workspace(allocator(c.device), bytes);
  RG_CUDNN_CHECK(cudnnConvolutionBackwardFilter(c.handle, c.scaling.one(), c.d.x, x, c.d.y, dy, c.d.conv, algo,
                                                workspace.as<void>(), bytes, c.scaling.zero(), c.d.w, dw));
}

void max_pool2d(DType dtype, const void* x, void* y, int64_t* indices, int64_t planes, int64_t H, int64_t W, int64_t OH,
                int64_t OW, int64_t kernel, int64_t stride, int64_t padding) {
  const int64_t total = planes * OH * OW;
  if (total == 0) return;
  DeviceGuard guard(device_of(y));
  dispatch_compute("max_pool2d", dtype, [&](auto tag) {
    using T = decltype(tag);
    max_pool_kernel<T><<<blocks_for(total), kThreads>>>(static_cast<const T*>(x), static_cast<T*>(y), indices, planes,
                                                        H, W, OH, OW, kernel, stride, padding);
  });
  RG_CUDA_CHECK_LAUNCH();
}

void max_pool2d_backward(DType dtype, const void* dy, const int64_t* indices, void* dx, int64_t planes,
                         int64_t plane_in, int64_t plane_out) {
  DeviceGuard guard(device_of(dx));
  dispatch_compute("max_pool2d_backward", dtype, [&](auto tag) {
    using T = decltype(tag);
    RG_CUDA_CHECK(cudaMemset(dx, 0, sizeof(T) * static_cast<size_t>(planes * plane_in)));
    if (planes * plane_out == 0) return;
    max_pool_backward_kernel<T><<<blocks_for(planes * plane_out), kThreads>>>(static_cast<const T*>(dy), indices,
                                                                              static_cast<T*>(dx), planes, plane_in,
                                                                              plane_out);
  });
  RG_CUDA_CHECK_LAUNCH();
}

// Note [Max pooling on cuDNN].
void max_pool2d_cudnn(DType dtype, const void* x, void* y, const PoolShape& s) {
  if (s.N * s.C * s.OH * s.OW == 0) return;
  const int device = device_of(y);
  DeviceGuard guard(device);
  const PoolDescriptors d(dtype, s.N, s.C, s.H, s.W, s.OH, s.OW, s.kernel, s.stride, s.padding);
  const Scaling scaling(dtype);
  RG_CUDNN_CHECK(cudnnPoolingForward(cudnn_handle(device), d.pool, scaling.one(), d.x, x, scaling.zero(), d.y, y));
}

void max_pool2d_cudnn_backward(DType dtype, const void* x, const void* y, const void* dy, void* dx,
                               const PoolShape& s) {
  const int device = device_of(dx);
  DeviceGuard guard(device);
  if (s.N * s.C * s.OH * s.OW == 0) {  // nothing pooled: no gradient reaches x
    RG_CUDA_CHECK(cudaMemset(dx, 0, dtype_size(dtype) * static_cast<size_t>(s.N * s.C * s.H * s.W)));
    return;
  }
  const PoolDescriptors d(dtype, s.N, s.C, s.H, s.W, s.OH, s.OW, s.kernel, s.stride, s.padding);
  const Scaling scaling(dtype);
  RG_CUDNN_CHECK(cudnnPoolingBackward(cudnn_handle(device), d.pool, scaling.one(), d.y, y, d.y, dy, d.x, x,
                                      scaling.zero(), d.x, dx));
}

}  // namespace ringgrad::cuda
