// CUDA against CPU on random inputs: each CUDA kernel is checked against the CPU kernel of the same
// op, through the public API (an op's front end picks the backend from its tensors' device).
//
// Without a CUDA device the executable prints "skipped: no CUDA device" and exits with 77, which
// CTest reports as skipped rather than failed (SKIP_RETURN_CODE in tests/cuda/CMakeLists.txt).
//
// Tolerances:
//   * copies, casts, + - * / maximum relu neg, comparisons, where: both backends compute in the same
//     precision and round once, so the results must be identical.
//   * exp tanh sigmoid gelu: CUDA's libdevice and the CPU's libm may differ by a few ulps: rtol 1e-5.
//     In f16/bf16 that can move a result across a rounding boundary: one ulp (rtol 1e-2 / 2e-3).
//   * sum/mean: both accumulate f32 in f64, in different orders, and round once: rtol 1e-6.
//   * matmul: cuBLAS and BLAS add in different orders; k = 96 terms of size ~1: atol 1e-4 in f32.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cuda_runtime.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <thread>
#include <vector>

#include "core/cuda/streams.h"
#include "ringgrad.h"

using namespace ringgrad;

namespace {

const Device kCuda = Device::cuda(0);

// Random f32 values on the CPU, converted to `dtype` (so every dtype sees the same numbers).
Tensor randn_cpu(const Shape& shape, uint64_t seed, DType dtype = DType::f32) {
  Generator gen(seed);
  return randn(shape, gen).to(dtype);
}

Tensor uniform_cpu(const Shape& shape, uint64_t seed, double lo, double hi) {
  Generator gen(seed);
  return uniform(shape, lo, hi, gen);
}

// `on_cuda`: an op's result computed on the GPU; `on_cpu`: the same op on the CPU. rtol = atol = 0
// asks for identical values (NaN matching NaN).
void check_matches_cpu(const Tensor& on_cuda, const Tensor& on_cpu, double rtol = 0, double atol = 0) {
  REQUIRE(on_cuda.device() == kCuda);
  REQUIRE(on_cpu.device().is_cpu());
  REQUIRE(on_cuda.shape() == on_cpu.shape());
  CHECK(on_cuda.dtype() == on_cpu.dtype());
  const Tensor back = on_cuda.to(Device::cpu());
  const bool same = rtol == 0 && atol == 0 ? equal(back, on_cpu) : allclose(back, on_cpu, rtol, atol);
  CHECK_MESSAGE(same, "max |cuda - cpu| = ", max_abs_diff(back, on_cpu), " over ", shape_str(on_cpu.shape()), " ",
                dtype_name(on_cpu.dtype()));
}

}  // namespace

TEST_CASE("copies between host and device are exact") {
  for (DType dtype : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    CAPTURE(dtype_name(dtype));
    const Tensor x = randn_cpu({37, 53}, 1, dtype);
    const Tensor on_gpu = x.to(kCuda);
    CHECK(on_gpu.device() == kCuda);
    CHECK(equal(on_gpu.to(Device::cpu()), x));
  }
  const Tensor ints = arange(-100, 100, 1, TensorOptions{.dtype = DType::i64});
  CHECK(equal(ints.to(kCuda).to(Device::cpu()), ints));

  // A transposed view crosses devices in logical order, and becomes dense on the GPU too.
  const Tensor t = randn_cpu({8, 5}, 2).t();
  check_matches_cpu(t.to(kCuda), t);
  check_matches_cpu(t.to(kCuda).contiguous(), t.contiguous());
  // Device-to-device copy.
  check_matches_cpu(t.to(kCuda).clone(), t.clone());
}

TEST_CASE("binary ops broadcast and match the CPU") {
  const Tensor a = randn_cpu({4, 1, 5}, 10);
  const Tensor b = uniform_cpu({3, 5}, 11, 0.5, 2.0);  // away from 0: a safe divisor
  const Tensor ga = a.to(kCuda), gb = b.to(kCuda);
  check_matches_cpu(add(ga, gb), add(a, b));
  check_matches_cpu(sub(ga, gb), sub(a, b));
  check_matches_cpu(mul(ga, gb), mul(a, b));
  check_matches_cpu(div(ga, gb), div(a, b));
  check_matches_cpu(maximum(ga, gb), maximum(a, b));
  check_matches_cpu(gt(ga, gb), gt(a, b));
  check_matches_cpu(where(gt(ga, gb), ga, gb), where(gt(a, b), a, b));
  check_matches_cpu(ga * 3.0 + 1.5, a * 3.0 + 1.5);

  SUBCASE("non-contiguous (transposed) operands") {
    const Tensor x = randn_cpu({5, 4}, 12).t();  // (4, 5), strides (1, 4)
    const Tensor y = uniform_cpu({4, 5}, 13, 0.5, 2.0);
    check_matches_cpu(add(x.to(kCuda), y.to(kCuda)), add(x, y));
    check_matches_cpu(div(y.to(kCuda), x.to(kCuda)), div(y, x));
    // The view itself on the GPU (not a dense copy of it).
    const Tensor gx = randn_cpu({5, 4}, 12).to(kCuda).t();
    check_matches_cpu(mul(gx, y.to(kCuda)), mul(x, y));
  }
  SUBCASE("f16 and bf16 compute in f32 and round once, like the CPU") {
    for (DType dtype : {DType::f16, DType::bf16}) {
      CAPTURE(dtype_name(dtype));
      const Tensor h = a.to(dtype), k = b.to(dtype);
      check_matches_cpu(add(h.to(kCuda), k.to(kCuda)), add(h, k));
      check_matches_cpu(mul(h.to(kCuda), k.to(kCuda)), mul(h, k));
      check_matches_cpu(div(h.to(kCuda), k.to(kCuda)), div(h, k));
    }
  }
  SUBCASE("integers") {
    const Tensor i = arange(-50, 50, 1, TensorOptions{.dtype = DType::i64}).view({10, 10});
    const Tensor j = arange(0, 10, 1, TensorOptions{.dtype = DType::i64});
    check_matches_cpu(add(i.to(kCuda), j.to(kCuda)), add(i, j));
    check_matches_cpu(mul(i.to(kCuda), j.to(kCuda)), mul(i, j));
  }
}

TEST_CASE("unary ops match the CPU") {
  const Tensor x = randn_cpu({64, 33}, 20) * 2.0;
  const Tensor xt = randn_cpu({33, 64}, 21).t();  // non-contiguous
  for (const Tensor& in : {x, xt}) {
    const Tensor g = in.to(kCuda);
    check_matches_cpu(relu(g), relu(in));
    check_matches_cpu(neg(g), neg(in));
    check_matches_cpu(exp(g), exp(in), 1e-5, 1e-6);
    check_matches_cpu(tanh(g), tanh(in), 1e-5, 1e-6);
    check_matches_cpu(sigmoid(g), sigmoid(in), 1e-5, 1e-6);
    check_matches_cpu(gelu(g), gelu(in), 1e-5, 1e-6);
  }
  const Tensor d = x.to(DType::f64);
  check_matches_cpu(gelu(d.to(kCuda)), gelu(d), 1e-12, 1e-14);
  for (DType dtype : {DType::f16, DType::bf16}) {
    CAPTURE(dtype_name(dtype));
    const double ulp = dtype == DType::f16 ? 2e-3 : 1e-2;
    const Tensor h = x.to(dtype);
    check_matches_cpu(exp(h.to(kCuda)), exp(h), ulp, 1e-3);
    check_matches_cpu(gelu(h.to(kCuda)), gelu(h), ulp, 1e-3);
    check_matches_cpu(relu(h.to(kCuda)), relu(h));
  }
}

TEST_CASE("casts round like the CPU, special values included") {
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  // Around the f16 limits: largest finite (65504), the rounding boundary to Inf (65520), the
  // smallest normal (2^-14), subnormals and values that round to zero, and ties.
  const std::vector<double> special = {
      0.0,  -0.0, 1.0,    -1.0, 1.0 / 3,       65504,        65519,  65520, 1e5,  -1e5, std::ldexp(1.0, -14),
      6e-8, 3e-8, 2.9e-8, 1e-8, 1.00048828125, 1.0009765625, 3.0e38, inf,   -inf, nan};
  const Tensor s = from_vector(special, {static_cast<int64_t>(special.size())});
  const Tensor r = randn_cpu({1000}, 30) * 1000.0;
  for (const Tensor& x : {s, r}) {
    for (DType dtype : {DType::f16, DType::bf16, DType::f64}) {
      CAPTURE(dtype_name(dtype));
      const Tensor on_gpu = x.to(kCuda).to(dtype);
      check_matches_cpu(on_gpu, x.to(dtype));
      check_matches_cpu(on_gpu.to(DType::f32), x.to(dtype).to(DType::f32));
    }
  }
  check_matches_cpu(r.to(kCuda).to(DType::i32), r.to(DType::i32));
  const Tensor i = arange(-1000, 1000, 7, TensorOptions{.dtype = DType::i64});
  check_matches_cpu(i.to(kCuda).to(DType::f16), i.to(DType::f16));
  check_matches_cpu(i.to(kCuda).to(DType::f32), i.to(DType::f32));
}

TEST_CASE("sum, mean and max over dims match the CPU") {
  const Tensor x = randn_cpu({6, 7, 8}, 40);
  const Tensor g = x.to(kCuda);
  check_matches_cpu(sum(g), sum(x), 1e-6, 1e-6);
  check_matches_cpu(mean(g), mean(x), 1e-6, 1e-6);
  check_matches_cpu(sum(g, {1}), sum(x, {1}), 1e-6, 1e-6);
  check_matches_cpu(sum(g, {0, 2}), sum(x, {0, 2}), 1e-6, 1e-6);
  check_matches_cpu(mean(g, {2}, /*keepdim=*/true), mean(x, {2}, /*keepdim=*/true), 1e-6, 1e-6);
  check_matches_cpu(mean(g, {0}), mean(x, {0}), 1e-6, 1e-6);
  check_matches_cpu(max(g, -1), max(x, -1));
  check_matches_cpu(max(g, 0), max(x, 0));
  check_matches_cpu(argmax(g, -1), argmax(x, -1));
  check_matches_cpu(argmax(g, 1), argmax(x, 1));

  SUBCASE("row lengths that take each kernel path") {
    // (rows, cols): a warp per row; a block per row; few long rows split into chunks; one huge row.
    for (const Shape& shape : {Shape{300, 100}, Shape{4, 5000}, Shape{3, 100000}, Shape{1, 1 << 20}}) {
      CAPTURE(shape_str(shape));
      const Tensor y = randn_cpu(shape, 41);
      check_matches_cpu(sum(y.to(kCuda), {1}), sum(y, {1}), 1e-6, 1e-5);
      check_matches_cpu(mean(y.to(kCuda), {1}), mean(y, {1}), 1e-6, 1e-6);
      check_matches_cpu(max(y.to(kCuda), 1), max(y, 1));
      check_matches_cpu(argmax(y.to(kCuda), 1), argmax(y, 1));
    }
  }
  SUBCASE("f16 accumulates in f32") {
    const Tensor h = x.to(DType::f16);
    check_matches_cpu(sum(h.to(kCuda), {2}), sum(h, {2}), 2e-3, 1e-3);
    check_matches_cpu(mean(h.to(kCuda), {0, 1}), mean(h, {0, 1}), 2e-3, 1e-3);
  }
}

TEST_CASE("matmul matches the CPU, transposed views included") {
  const Tensor a = randn_cpu({33, 96}, 50);
  const Tensor b = randn_cpu({96, 17}, 51);
  check_matches_cpu(matmul(a.to(kCuda), b.to(kCuda)), matmul(a, b), 1e-5, 1e-4);

  // Transposed views go to cuBLAS with a transpose flag.
  const Tensor at = randn_cpu({96, 33}, 52).t();
  const Tensor bt = randn_cpu({17, 96}, 53).t();
  check_matches_cpu(matmul(at.to(kCuda), b.to(kCuda)), matmul(at, b), 1e-5, 1e-4);
  check_matches_cpu(matmul(a.to(kCuda), bt.to(kCuda)), matmul(a, bt), 1e-5, 1e-4);
  const Tensor gat = randn_cpu({96, 33}, 52).to(kCuda).t();  // the view itself on the GPU
  check_matches_cpu(matmul(gat, bt.to(kCuda)), matmul(at, bt), 1e-5, 1e-4);

  // Batched, a vector, and f64.
  const Tensor x = randn_cpu({3, 5, 7}, 54), w = randn_cpu({3, 7, 4}, 55);
  check_matches_cpu(bmm(x.to(kCuda), w.to(kCuda)), bmm(x, w), 1e-5, 1e-5);
  const Tensor v = randn_cpu({96}, 56);
  check_matches_cpu(matmul(a.to(kCuda), v.to(kCuda)), matmul(a, v), 1e-5, 1e-4);
  const Tensor ad = a.to(DType::f64), bd = b.to(DType::f64);
  check_matches_cpu(matmul(ad.to(kCuda), bd.to(kCuda)), matmul(ad, bd), 1e-12, 1e-12);
}

TEST_CASE("f16 and bf16 matmul accumulate in f32") {
  const Tensor a = randn_cpu({33, 96}, 60), b = randn_cpu({96, 17}, 61);
  for (DType dtype : {DType::f16, DType::bf16}) {
    CAPTURE(dtype_name(dtype));
    const Tensor ah = a.to(dtype), bh = b.to(dtype);
    const Tensor on_gpu = matmul(ah.to(kCuda), bh.to(kCuda));
    CHECK(on_gpu.dtype() == dtype);
    // Reference: the same rounded inputs multiplied in f32 on the CPU; the GPU result differs by its
    // final rounding to f16 / bf16 (half an ulp) plus f32 summation order.
    const Tensor expected = matmul(ah.to(DType::f32), bh.to(DType::f32));
    const double rtol = dtype == DType::f16 ? 1e-3 : 8e-3;
    check_matches_cpu(on_gpu.to(DType::f32), expected, rtol, 1e-2);
  }
}

TEST_CASE("a block another stream used is reused only after that stream has passed its free") {
  // Note [Streams and block reuse]: the side stream is held up by a host function until `release`
  // is set, so work queued there before the tensor is freed cannot have finished.
  empty_cache(kCuda);  // before the side stream is held: cudaFree waits for every stream
  cudaStream_t side = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking) == cudaSuccess);
  std::atomic<bool> release{false};
  struct Release {  // the host function must end even if a check below fails
    std::atomic<bool>& flag;
    cudaStream_t stream;
    ~Release() {
      flag = true;
      (void)cudaStreamSynchronize(stream);
    }
  } release_on_exit{release, side};
  REQUIRE(cudaLaunchHostFunc(
              side,
              [](void* flag) {
                while (!static_cast<std::atomic<bool>*>(flag)->load())
                  std::this_thread::sleep_for(std::chrono::milliseconds(1));
              },
              &release) == cudaSuccess);
  const Shape shape{int64_t{1} << 18};
  const TensorOptions on_gpu{.dtype = DType::f32, .device = kCuda};
  const MemoryStats before = memory_stats(kCuda);
  void* used_by_side = nullptr;
  {
    const Tensor t = empty(shape, on_gpu);
    used_by_side = t.storage()->data();
    cuda::record_stream(t, side);
  }
  const MemoryStats freed = memory_stats(kCuda);
  CHECK(freed.allocated == before.allocated);                                      // freed by the host...
  CHECK(freed.reserved == before.reserved + allocation_size_class(shape[0] * 4));  // ...kept, not reusable
  {
    const Tensor other = empty(shape, on_gpu);  // the side stream has not passed the free: a new block
    CHECK(other.storage()->data() != used_by_side);
    CHECK(memory_stats(kCuda).os_allocations == before.os_allocations + 2);
  }
  release = true;
  REQUIRE(cudaStreamSynchronize(side) == cudaSuccess);
  {
    // Both blocks are back in the cache: two tensors of that size need no new cudaMalloc.
    const Tensor a = empty(shape, on_gpu), b = empty(shape, on_gpu);
    CHECK((a.storage()->data() == used_by_side || b.storage()->data() == used_by_side));
    CHECK(memory_stats(kCuda).os_allocations == before.os_allocations + 2);
  }
  // A stream about to be destroyed is forgotten: a block it used is then cached at once when freed.
  void* forgotten = nullptr;
  {
    const Tensor t = empty(shape, on_gpu);
    forgotten = t.storage()->data();
    cuda::record_stream(t, side);
    cuda::forget_stream(kCuda.index, side);
  }
  {
    const Tensor again = empty(shape, on_gpu);
    CHECK(again.storage()->data() == forgotten);
  }
  CHECK_THROWS_WITH(cuda::record_stream(zeros({2}), side), doctest::Contains("needs a CUDA tensor"));
}

TEST_CASE("the CUDA caching allocator counts bytes and reuses blocks") {
  empty_cache(kCuda);
  reset_peak_memory_stats(kCuda);
  const MemoryStats before = memory_stats(kCuda);
  const size_t nbytes = size_t{1} << 20;
  const size_t block = allocation_size_class(nbytes);
  const TensorOptions on_gpu{.dtype = DType::f32, .device = kCuda};
  {
    const Tensor t = empty({static_cast<int64_t>(nbytes / 4)}, on_gpu);
    const MemoryStats during = memory_stats(kCuda);
    CHECK(during.allocated == before.allocated + block);
    CHECK(during.reserved == before.reserved + block);
    CHECK(during.peak_allocated >= during.allocated);
    CHECK(during.os_allocations == before.os_allocations + 1);
  }
  const MemoryStats freed = memory_stats(kCuda);
  CHECK(freed.allocated == before.allocated);        // back down...
  CHECK(freed.reserved == before.reserved + block);  // ...but the block stays cached
  CHECK(freed.peak_allocated >= before.allocated + block);
  {
    // The same size again: served from the cache, no new cudaMalloc.
    const Tensor again = empty({static_cast<int64_t>(nbytes / 4)}, on_gpu);
    CHECK(memory_stats(kCuda).os_allocations == before.os_allocations + 1);
    CHECK(memory_stats(kCuda).allocated == before.allocated + block);
  }
  empty_cache(kCuda);
  const MemoryStats emptied = memory_stats(kCuda);
  CHECK(emptied.reserved == before.reserved);
  CHECK(emptied.os_frees == before.os_frees + 1);
}

TEST_CASE("a device that does not exist is an error, not a crash") {
  const Device missing = Device::cuda(cuda_device_count());
  CHECK_THROWS_AS(empty({4}, TensorOptions{.device = missing}), Error);
}

int main(int argc, char** argv) {
  if (!cuda_compiled() || cuda_device_count() == 0) {
    std::printf("skipped: no CUDA device\n");
    return 77;
  }
  doctest::Context context(argc, argv);
  return context.run();
}
