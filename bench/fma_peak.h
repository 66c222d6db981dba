// The core's real floating-point ceiling: f32 fused multiply-adds in independent chains, the most
// arithmetic the execution units can retire. Every GFLOP/s the benchmarks print is a share of this
// (docs/benchmarks.md); OpenBLAS's sgemm is only a second reference, since it runs whatever kernels
// its build and OPENBLAS_CORETYPE pick (AVX2 on these machines, about half the AVX-512 peak).
//
// Why independent chains: an FMA's result is ready only after its latency (4 cycles on Zen), and a
// core issues two per cycle, so one chain would measure the latency. Each thread keeps `kChains`
// accumulators in registers (16 of the 32 zmm, 12 of the 16 ymm), enough to cover latency x issue
// width. The loop compiles for its ISA through a function attribute, so this file needs no
// -march flag and runs on any x86-64: the AVX-512 figure is skipped where the CPU lacks AVX-512F.
#pragma once

#include <immintrin.h>

#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

namespace fma_peak {

// avx512_bf16: not an f32 FMA but AVX512_BF16's VDPBF16PS, the instruction of the bf16 GEMM
// (core/cpu/bf16_gemm.cpp): per f32 lane two bf16 products and two additions, i.e. 4 FLOPs.
enum class Isa { avx2, avx512, avx512_bf16 };

inline const char* isa_name(Isa isa) {
  return isa == Isa::avx512_bf16 ? "AVX512_BF16 dot" : isa == Isa::avx512 ? "AVX-512" : "AVX2";
}

inline bool cpu_has(Isa isa) {
  switch (isa) {
    case Isa::avx512_bf16: return __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512f");
    case Isa::avx512: return __builtin_cpu_supports("avx512f");
    default: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  }
}

// The sum of every lane of n accumulators: keeps each chain live without printing it.
__attribute__((target("avx512f"))) inline float sum_of_chains(const __m512* acc, int n) {
  __m512 sum = acc[0];
  for (int i = 1; i < n; ++i) sum = _mm512_add_ps(sum, acc[i]);
  alignas(64) float lanes[16];  // not _mm512_reduce_add_ps: GCC 12 warns inside it (-Wuninitialized)
  _mm512_store_ps(lanes, sum);
  float total = 0;
  for (float v : lanes) total += v;
  return total;
}

// Runs `iters` rounds of kChains FMAs; returns a value that depends on every chain (so the compiler
// keeps them all) and is never printed.
__attribute__((target("avx512f"))) inline float chains_avx512(int64_t iters) {
  constexpr int kChains = 16;
  __m512 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm512_set1_ps(1.0f + 1e-3f * static_cast<float>(i));
  const __m512 mul = _mm512_set1_ps(0.9999999f), add = _mm512_set1_ps(1e-7f);
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 16
    for (int i = 0; i < kChains; ++i) acc[i] = _mm512_fmadd_ps(acc[i], mul, add);
  }
  return sum_of_chains(acc, kChains);
}

// The same with the bf16 dot product: acc += (x0 * y0 + x1 * y1) per lane, 16 chains.
__attribute__((target("avx512f,avx512bf16"))) inline float chains_bf16_dot(int64_t iters) {
  constexpr int kChains = 16;
  __m512 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm512_set1_ps(1.0f + 1e-3f * static_cast<float>(i));
  // bf16 pairs (1e-3, 1e-3) and (1, 1) as 32-bit words: each round adds 2e-6 per lane
  const __m512bh x = (__m512bh)_mm512_set1_epi32(0x3a833a83), y = (__m512bh)_mm512_set1_epi32(0x3f803f80);
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 16
    for (int i = 0; i < kChains; ++i) acc[i] = _mm512_dpbf16_ps(acc[i], x, y);
  }
  return sum_of_chains(acc, kChains);
}

__attribute__((target("avx2,fma"))) inline float chains_avx2(int64_t iters) {
  constexpr int kChains = 12;
  __m256 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm256_set1_ps(1.0f + 1e-3f * static_cast<float>(i));
  const __m256 mul = _mm256_set1_ps(0.9999999f), add = _mm256_set1_ps(1e-7f);
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < kChains; ++i) acc[i] = _mm256_fmadd_ps(acc[i], mul, add);
  }
  __m256 sum = acc[0];
  for (int i = 1; i < kChains; ++i) sum = _mm256_add_ps(sum, acc[i]);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, sum);
  float total = 0;
  for (float v : lanes) total += v;
  return total;
}

// FLOPs of one round: chains x lanes x 2 (a multiply and an add; the bf16 dot product: two of each).
inline double flops_per_round(Isa isa) {
  return isa == Isa::avx512_bf16 ? 16.0 * 16 * 4 : isa == Isa::avx512 ? 16.0 * 16 * 2 : 12.0 * 8 * 2;
}

// GFLOP/s of `threads` threads running the chains at once, best of `repeat` runs of ~0.2 s.
inline double measure_gflops(Isa isa, int threads, int repeat) {
  const int64_t iters = isa == Isa::avx2 ? 100'000'000 : 50'000'000;
  double best = 0;
  for (int r = 0; r < repeat; ++r) {
    std::vector<std::thread> pool;
    std::vector<float> sink(static_cast<size_t>(threads));
    const auto start = std::chrono::steady_clock::now();
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&, t] {
        sink[t] = isa == Isa::avx512_bf16 ? chains_bf16_dot(iters)
                  : isa == Isa::avx512    ? chains_avx512(iters)
                                          : chains_avx2(iters);
      });
    for (auto& th : pool) th.join();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double gflops = threads * static_cast<double>(iters) * flops_per_round(isa) / seconds / 1e9;
    if (gflops > best && sink[0] != -1.0f) best = gflops;
  }
  return best;
}

}  // namespace fma_peak
