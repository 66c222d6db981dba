// The CPU caching allocator: statistics, size classes, alignment, and the steady-state promise that a
// repeated step makes no new OS allocations (core/allocator.h).
//
// These tests read process-wide statistics, so each one measures differences around its own
// allocations; doctest runs test cases one at a time on one thread.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "test_util.h"

using namespace ringgrad;

namespace {
MemoryStats cpu_stats() { return memory_stats(Device::cpu()); }
}  // namespace

TEST_CASE("allocating a tensor raises allocated by at least its bytes and freeing lowers it again") {
  const MemoryStats before = cpu_stats();
  size_t during_allocated = 0;
  {
    Tensor t = empty({1000, 250});  // 1,000,000 bytes of f32
    const MemoryStats during = cpu_stats();
    during_allocated = during.allocated;
    CHECK(during.allocated >= before.allocated + t.nbytes());
    CHECK(during.allocated - before.allocated == allocation_size_class(t.nbytes()));
    CHECK(during.reserved >= during.allocated);
    CHECK(during.peak_allocated >= during.allocated);
  }
  const MemoryStats after = cpu_stats();
  CHECK(after.allocated == before.allocated);
  CHECK(after.allocated < during_allocated);
  CHECK(after.reserved >= after.allocated);  // the freed block may stay cached
}

TEST_CASE("views share their storage and allocate nothing") {
  Tensor t = zeros({64, 64});
  const MemoryStats before = cpu_stats();
  Tensor v = t.t().slice(0, 0, 64, 2);
  Tensor a = t.view({4096});
  Tensor b = t.narrow(0, 3, 10);
  Tensor c = t.expand({2, 64, 64});
  CHECK(cpu_stats().allocated == before.allocated);
}

TEST_CASE("peak tracks the highest allocation and reset_peak_memory_stats lowers it to the current") {
  reset_peak_memory_stats(Device::cpu());
  const MemoryStats base = cpu_stats();
  CHECK(base.peak_allocated == base.allocated);
  CHECK(base.os_allocations == 0);
  CHECK(base.os_frees == 0);
  {
    Tensor big = empty({4 << 20});  // 16 MiB
    Tensor small = empty({1000});
    (void)small;
  }
  const MemoryStats after = cpu_stats();
  CHECK(after.allocated == base.allocated);
  CHECK(after.peak_allocated >= base.allocated + (size_t{16} << 20));
  reset_peak_memory_stats(Device::cpu());
  CHECK(cpu_stats().peak_allocated == base.allocated);
}

TEST_CASE("a repeated step makes no new OS allocations once the cache is warm") {
  auto step = [] {
    // A small training-step-like mix: several sizes, temporaries, a reduction.
    Tensor a = ones({256, 300});
    Tensor b = full({256, 300}, 2.0);
    Tensor c = a * b + a;
    Tensor d = matmul(c, c.t());
    Tensor e = empty({3, 1000, 17});
    Tensor s = d.sum({1});
    (void)e;
    return s.numel();
  };
  for (int warm = 0; warm < 3; ++warm) step();
  reset_peak_memory_stats(Device::cpu());  // zeroes the OS call counters
  const MemoryStats before = cpu_stats();
  for (int i = 0; i < 50; ++i) step();
  const MemoryStats after = cpu_stats();
  CHECK(after.os_allocations == before.os_allocations);
  CHECK(after.os_frees == before.os_frees);
  CHECK(after.allocated == before.allocated);
  CHECK(after.reserved == before.reserved);
}

TEST_CASE("a freed block is reused for a later request of the same size class") {
  const size_t first = 5000, second = 5100;  // both in the 5120-byte class
  REQUIRE(allocation_size_class(first) == allocation_size_class(second));
  Allocator& alloc = allocator_for(Device::cpu());
  alloc.deallocate(alloc.allocate(first), first);  // now a 5120-byte block is cached
  reset_peak_memory_stats(Device::cpu());
  void* p = alloc.allocate(second);
  CHECK(cpu_stats().os_allocations == 0);
  alloc.deallocate(p, second);
}

TEST_CASE("empty_cache returns cached blocks so that reserved equals allocated") {
  { Tensor t = empty({3 << 20}); }  // leaves a 12 MiB block in the cache
  const MemoryStats cached = cpu_stats();
  CHECK(cached.reserved >= cached.allocated + (size_t{12} << 20));
  empty_cache(Device::cpu());
  const MemoryStats emptied = cpu_stats();
  CHECK(emptied.reserved == emptied.allocated);
  CHECK(emptied.allocated == cached.allocated);
}

TEST_CASE("allocation_size_class rounds up to 64-byte multiples with at most 25% slack above 4 KiB") {
  size_t previous = 0;
  std::vector<size_t> requests;
  for (size_t n = 1; n <= 10000; ++n) requests.push_back(n);
  for (size_t n = 10000; n < (size_t{1} << 34); n = n + n / 7 + 1) {
    requests.push_back(n);
    requests.push_back(n + 1);
  }
  for (int k = 12; k < 34; ++k) {  // around every power of two
    const size_t p = size_t{1} << k;
    requests.insert(requests.end(), {p - 1, p, p + 1, p + p / 4, p + p / 4 + 1});
  }
  std::sort(requests.begin(), requests.end());
  int bad = 0;
  std::string first;
  for (size_t n : requests) {
    const size_t c = allocation_size_class(n);
    std::string why;
    if (c < n) why = "smaller than the request";
    else if (c % 64 != 0) why = "not a multiple of 64";
    else if (n <= 4096 && c - n >= 64) why = "more than 63 bytes of slack up to 4 KiB";
    else if (n > 4096 && static_cast<double>(c - n) > 0.25 * static_cast<double>(n)) why = "more than 25% slack";
    else if (c < previous) why = "not monotonic";
    if (!why.empty() && bad++ == 0) first = std::to_string(n) + " -> " + std::to_string(c) + ": " + why;
    previous = c;
  }
  CHECK_MESSAGE(bad == 0, bad << " requests wrong; first: " << first);
  // Four classes per power of two above 4 KiB: (2^k, 2^(k+1)] maps onto 1.25, 1.5, 1.75, 2 x 2^k.
  CHECK(allocation_size_class(4097) == 5120);
  CHECK(allocation_size_class(5121) == 6144);
  CHECK(allocation_size_class(8192) == 8192);
  CHECK(allocation_size_class(8193) == 10240);
  CHECK(allocation_size_class(64) == 64);
  CHECK(allocation_size_class(65) == 128);
}

TEST_CASE("allocations are 64-byte aligned") {
  Allocator& alloc = allocator_for(Device::cpu());
  for (size_t n : {size_t{0}, size_t{1}, size_t{3}, size_t{64}, size_t{100}, size_t{4097}, size_t{1} << 20,
                   (size_t{1} << 20) + 12345}) {
    INFO("nbytes " << n);
    void* p = alloc.allocate(n);
    CHECK(reinterpret_cast<uintptr_t>(p) % 64 == 0);
    alloc.deallocate(p, n);
  }
  for (int64_t n : {1, 7, 1000, 100000}) {
    Tensor t = empty({n}, {.dtype = DType::u8});
    CHECK(reinterpret_cast<uintptr_t>(t.raw_data()) % 64 == 0);
  }
}
