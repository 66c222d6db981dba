// micro_ops: throughput of ringgrad's basic operations, each printed beside its ceiling.
//
//   micro_ops [--threads N] [--repeat N] [--warmup N] [--ceilings-only] [--only gemm|attention|epilogue|elementwise]
//
// GEMM   ringgrad::matmul on square products, on the W1 MLP shapes (784-512-512-10, batch 128;
//        forward x @ w^T and the backward products) and on W3 GPT-mini's, in GFLOP/s = 2·M·N·K / time. Beside each one,
//        cblas_sgemm called directly on the same operands (same transposes, same threads). The ceiling
//        of the table is the FMA peak of the threads used (bench/fma_peak.h: AVX-512 where the CPU has
//        it, else AVX2); cblas_sgemm on a 2048 x 2048 product is printed as a second reference.
//        The bf16 columns: the same product on bf16 operands (the AVX512_BF16 dot-product GEMM where
//        the CPU has it, else f32 compute), its speed-up over f32 and its share of the bf16
//        dot-product peak (bench/fma_peak.h; the FMA peak where bf16 is computed in f32).
//        The f16 columns: the product on f16 operands, computed in f32 blocks (Note [Half-precision
//        products in f32 blocks] in core/native/matmul.cpp), and its speed against whole casts
//        (both operands cast to f32, the f32 product, the result cast back), timed alternately.
// attention  causal self-attention from the packed projection on W3's shape (16 sequences of 128,
//        4 heads of 32), forward and backward, with the fused kernel (Note [Fused causal attention])
//        and the plain one alternated sample by sample, in GFLOP/s of the useful products (each
//        visible (query, key) pair: 4·D FLOPs forward, 8·D backward); `check` compares the two.
// epilogue  W3's c_fc (2048 x 128 @ (512 x 128)^T + b, then GELU) with GELU in the GEMM's epilogue,
//        as the GEMM started from the bias followed by the GELU op, and as the plain composition
//        (fill the rows with b, accumulate, GELU op), alternated; the three must agree to the bit.
// memory add, mul, exp on 64 MiB f32 tensors through ringgrad ops, in GB/s = (bytes read + bytes
//        written) / time, against the bandwidth of std::memcpy on one core (256 MiB buffers; a copy
//        reads and writes every byte, so it is counted the same way).
//
// --ceilings-only prints the `# ceiling:` lines (the FMA peak per ISA, the sgemm reference, memcpy)
// and stops (a few seconds): bench/run.sh measures them this way for 1 and 2 threads in the same run
// as the workloads.
//
// Timing: std::chrono::steady_clock; `warmup` untimed runs, then `repeat` samples; a sample repeats
// the operation until it lasts at least 5 ms (small GEMMs take microseconds). ringgrad and the direct
// BLAS call alternate sample by sample, so both see the same machine noise. The table shows the best
// and the median sample. Each operation's result is checked once against an independent computation
// (`check` column).
//
// Letters in shapes: M, K, N as in (M, K) @ (K, N); `^T` marks an operand used transposed.
#include <cblas.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bench/fma_peak.h"
#include "core/native/native.h"
#include "examples/common/command_line.h"
#include "examples/common/flags.h"
#include "ringgrad.h"

namespace rg = ringgrad;
using Clock = std::chrono::steady_clock;

namespace {

struct Options {
  int threads = 0;  // 0: ringgrad's default (cores / ranks on this node)
  int repeat = 10;
  int warmup = 2;
  bool ceilings_only = false;  // print the sgemm and memcpy ceilings, skip the tables
  std::string only = "all";    // one table: gemm, attention or elementwise
};

// The flags, or the exit code when the program should stop (--help, --version, a mistake).
std::optional<int> parse_options(int argc, char** argv, Options& opt) {
  CLI::App app{"GEMM and elementwise throughput through ringgrad's ops, beside OpenBLAS and memcpy bandwidth"};
  app.add_option("--threads", opt.threads, "compute threads, also used by BLAS (default: ringgrad's default)")
      ->check(rg::flags::int_in(0, rg::flags::max_threads()));
  app.add_option("--repeat", opt.repeat, "timed samples per operation")->check(rg::flags::int_in(1, 1'000'000));
  app.add_option("--warmup", opt.warmup, "untimed runs before the samples")->check(rg::flags::int_in(0, 1'000'000));
  app.add_flag("--ceilings-only", opt.ceilings_only, "print the sgemm peak and memcpy bandwidth lines only");
  app.add_option("--only", opt.only, "print one table after the ceilings")
      ->check(CLI::IsMember({"all", "gemm", "attention", "epilogue", "elementwise"}));
  return rg::flags::parse_command_line(app, argc, argv);
}

struct Stats {
  double best = 0;  // seconds per operation
  double median = 0;
};

Stats summarize(std::vector<double> samples) {
  std::sort(samples.begin(), samples.end());
  const size_t n = samples.size();
  const double median = n % 2 ? samples[n / 2] : 0.5 * (samples[n / 2 - 1] + samples[n / 2]);
  return {samples.front(), median};
}

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// Times `fns` (one or more variants of the same operation) sample by sample, alternating between them.
// Returns per-operation Stats for each function.
std::vector<Stats> measure(const std::vector<std::function<void()>>& fns, const Options& opt) {
  constexpr double kMinSampleSeconds = 5e-3;
  std::vector<int> iters(fns.size(), 1);
  for (size_t f = 0; f < fns.size(); ++f) {
    for (int w = 0; w < std::max(opt.warmup, 1); ++w) fns[f]();
    const auto start = Clock::now();
    fns[f]();
    const double once = seconds_since(start);
    if (once < kMinSampleSeconds) iters[f] = static_cast<int>(std::ceil(kMinSampleSeconds / std::max(once, 1e-9)));
  }
  std::vector<std::vector<double>> samples(fns.size());
  for (int r = 0; r < opt.repeat; ++r) {
    for (size_t f = 0; f < fns.size(); ++f) {
      const auto start = Clock::now();
      for (int i = 0; i < iters[f]; ++i) fns[f]();
      samples[f].push_back(seconds_since(start) / iters[f]);
    }
  }
  std::vector<Stats> out;
  for (auto& s : samples) out.push_back(summarize(std::move(s)));
  return out;
}

// ---- ceilings ----------------------------------------------------------------------------------

// Single-core memcpy bandwidth, counting bytes read + bytes written. Best of `repeat` copies.
Stats memcpy_bandwidth(const Options& opt) {
  const size_t bytes = size_t{256} << 20;
  std::vector<char> src(bytes), dst(bytes);
  std::memset(src.data(), 1, bytes);  // fault every page in before timing
  std::memset(dst.data(), 2, bytes);
  Stats t = measure({[&] { std::memcpy(dst.data(), src.data(), bytes); }}, opt)[0];
  if (dst[bytes / 2] != 1) std::fprintf(stderr, "memcpy check failed\n");
  return {2.0 * bytes / t.best / 1e9, 2.0 * bytes / t.median / 1e9};  // GB/s
}

// ---- GEMM --------------------------------------------------------------------------------------

struct GemmCase {
  std::string name;
  int64_t m, k, n;
  bool a_transposed;  // a is stored (K, M) and used as its transpose
  bool b_transposed;  // b is stored (N, K) and used as its transpose
};

// "128x784 @ (512x784)^T": each operand as stored, ^T when it is used transposed.
std::string gemm_shape(const GemmCase& c) {
  auto dims = [](int64_t rows, int64_t cols, bool transposed) {
    char buf[64];
    if (transposed)
      std::snprintf(buf, sizeof buf, "(%lldx%lld)^T", static_cast<long long>(cols), static_cast<long long>(rows));
    else std::snprintf(buf, sizeof buf, "%lldx%lld", static_cast<long long>(rows), static_cast<long long>(cols));
    return std::string(buf);
  };
  return dims(c.m, c.k, c.a_transposed) + " @ " + dims(c.k, c.n, c.b_transposed);
}

// OpenBLAS alone, with its own threads at ringgrad's thread count: the peer of ringgrad's matmul and
// the sgemm ceiling. (ringgrad itself keeps OpenBLAS single-threaded and splits GEMMs over its pool:
// Note [GEMMs split over the pool] in core/cpu/gemm.cpp.)
void cblas(const GemmCase& c, const float* a, const float* b, float* out) {
  openblas_set_num_threads(rg::num_threads());
  cblas_sgemm(CblasRowMajor, c.a_transposed ? CblasTrans : CblasNoTrans, c.b_transposed ? CblasTrans : CblasNoTrans,
              static_cast<int>(c.m), static_cast<int>(c.n), static_cast<int>(c.k), 1.0f, a,
              static_cast<int>(c.a_transposed ? c.m : c.k), b, static_cast<int>(c.b_transposed ? c.k : c.n), 0.0f, out,
              static_cast<int>(c.n));
  openblas_set_num_threads(1);
}

void print_rule() { std::printf("%s\n", std::string(162, '-').c_str()); }

// One row of the table: ringgrad's f32 matmul against cblas_sgemm, then the same product in bf16
// (the operands rounded to bf16, as mixed precision trains; checked against the f32 result with
// bf16's tolerance), its speed-up over f32 and its share of `bf16_peak`.
void run_gemm(const GemmCase& c, double fma_gflops, double bf16_peak, rg::Generator& gen, const Options& opt) {
  // Operands as stored; the transposed ones are handed to matmul as .t() views, as nn::Linear does.
  rg::Tensor a_stored = rg::randn(c.a_transposed ? rg::Shape{c.k, c.m} : rg::Shape{c.m, c.k}, gen);
  rg::Tensor b_stored = rg::randn(c.b_transposed ? rg::Shape{c.n, c.k} : rg::Shape{c.k, c.n}, gen);
  rg::Tensor a = c.a_transposed ? a_stored.t() : a_stored;
  rg::Tensor b = c.b_transposed ? b_stored.t() : b_stored;
  std::vector<float> reference(static_cast<size_t>(c.m * c.n));

  // check: ringgrad against BLAS on the same operands (sums of K products: relative tolerance).
  cblas(c, a_stored.data<float>(), b_stored.data<float>(), reference.data());
  const rg::Tensor ours = rg::matmul(a, b);
  bool ok = ours.shape() == rg::Shape{c.m, c.n};
  if (ok) {
    const rg::Tensor dense = ours.contiguous();
    const float* got = dense.data<float>();
    for (size_t i = 0; i < reference.size() && ok; ++i)
      ok = std::fabs(got[i] - reference[i]) <=
           1e-4f * std::sqrt(static_cast<float>(c.k)) * (1.0f + std::fabs(reference[i]));
  }

  // Timed in two blocks, ours first: interleaved, OpenBLAS's threads would still be yield-spinning
  // from the cblas sample while ours runs (Note [GEMMs split over the pool]).
  const Stats ours_t = measure({[&] { rg::matmul(a, b); }}, opt)[0];
  const Stats blas_t =
      measure({[&] { cblas(c, a_stored.data<float>(), b_stored.data<float>(), reference.data()); }}, opt)[0];
  const Stats t[2] = {ours_t, blas_t};
  const double flops = 2.0 * static_cast<double>(c.m) * static_cast<double>(c.n) * static_cast<double>(c.k);
  const double ours_best = flops / t[0].best / 1e9, ours_median = flops / t[0].median / 1e9;
  const double blas_best = flops / t[1].best / 1e9;

  // The operands rounded to a 16-bit dtype, laid out as the f32 ones; the check allows that dtype's
  // relative error (`tolerance`) on each of the K products.
  const auto rounded_operands = [&](rg::DType dtype, double tolerance) {
    const rg::Tensor as = a_stored.to(dtype), bs = b_stored.to(dtype);
    std::pair<rg::Tensor, rg::Tensor> operands{c.a_transposed ? as.t() : as, c.b_transposed ? bs.t() : bs};
    const std::vector<double> got = rg::matmul(operands.first, operands.second).to_vector();
    for (size_t i = 0; i < reference.size() && ok; ++i)
      ok = std::fabs(got[i] - reference[i]) <=
           tolerance * std::sqrt(static_cast<double>(c.k)) * (1.0 + std::fabs(reference[i]));
    return operands;
  };
  const std::pair<rg::Tensor, rg::Tensor> bf16_operands = rounded_operands(rg::DType::bf16, 2e-2);
  const rg::Tensor &a16 = bf16_operands.first, &b16 = bf16_operands.second;
  const double bf16_best = flops / measure({[&] { rg::matmul(a16, b16); }}, opt)[0].best / 1e9;

  // f16: in f32 blocks, against whole f32 casts around the f32 product, alternated.
  const std::pair<rg::Tensor, rg::Tensor> f16_operands = rounded_operands(rg::DType::f16, 1e-2);
  const rg::Tensor &ah = f16_operands.first, &bh = f16_operands.second;
  const std::vector<Stats> half_t =
      measure({[&] { rg::matmul(ah, bh); },
               [&] { rg::matmul(ah.to(rg::DType::f32), bh.to(rg::DType::f32)).to(rg::DType::f16); }},
              opt);
  const double f16_best = flops / half_t[0].best / 1e9;
  std::printf("%-12s %-28s %10.3f %10.3f %10.1f %10.1f %10.1f %8.2f %7.0f%% %5s %10.1f %8.2f %7.0f%% %10.1f %8.2f\n",
              c.name.c_str(), gemm_shape(c).c_str(), t[0].best * 1e3, t[0].median * 1e3, ours_best, ours_median,
              blas_best, ours_best / blas_best, 100.0 * ours_best / fma_gflops, ok ? "ok" : "WRONG", bf16_best,
              bf16_best / ours_best, 100.0 * bf16_best / bf16_peak, f16_best, half_t[1].best / half_t[0].best);
}

// ---- attention ---------------------------------------------------------------------------------

// Fusion on or off for one call, restored after.
template <class Fn>
auto with_fusion(bool on, Fn fn) {
  const bool before = rg::fusion_enabled();
  rg::set_fusion(on);
  auto out = fn();
  rg::set_fusion(before);
  return out;
}

void run_attention(int64_t B, int64_t T, int64_t H, int64_t D, double fma_gflops, rg::Generator& gen,
                   const Options& opt) {
  namespace native = rg::native;
  const int64_t C = H * D;
  const rg::Tensor qkv = rg::randn({B, T, 3 * C}, gen), dy = rg::randn({B, T, C}, gen);
  const auto forward = [&](bool fused) {
    return with_fusion(fused, [&] { return native::causal_self_attention(qkv, H); });
  };
  const native::AttentionOutput fused = forward(true), plain = forward(false);
  const auto backward = [&](const native::AttentionOutput& saved) {
    return native::causal_self_attention_backward(dy, qkv, saved, H);
  };
  const bool ran_fused = !fused.att.defined();
  const bool ok =
      rg::max_abs_diff(fused.y, plain.y) <= 1e-5 && rg::max_abs_diff(backward(fused), backward(plain)) <= 1e-4;
  const double pairs = static_cast<double>(B * H) * static_cast<double>(T) * static_cast<double>(T + 1) / 2;
  const std::string shape = "(" + std::to_string(B) + ", " + std::to_string(T) + ", 3x" + std::to_string(C) + "), " +
                            std::to_string(H) + " heads";
  for (const bool is_backward : {false, true}) {
    const std::vector<Stats> t = is_backward ? measure({[&] { backward(fused); }, [&] { backward(plain); }}, opt)
                                             : measure({[&] { forward(true); }, [&] { forward(false); }}, opt);
    const double flops = pairs * 4.0 * static_cast<double>(D) * (is_backward ? 2.0 : 1.0);
    for (size_t k = 0; k < 2; ++k) {
      const std::string name = std::string(is_backward ? "bwd " : "fwd ") + (k == 0 ? "fused" : "plain");
      std::printf("%-12s %-28s %10.3f %10.3f %10.1f %10.1f %7.0f%% %5s %8.2f\n", name.c_str(), shape.c_str(),
                  t[k].best * 1e3, t[k].median * 1e3, flops / t[k].best / 1e9, flops / t[k].median / 1e9,
                  100.0 * flops / t[k].best / 1e9 / fma_gflops, ok ? "ok" : "WRONG", t[1].best / t[k].best);
    }
  }
  if (!ran_fused) std::printf("# attention: the fused kernel does not run here (it needs AVX-512 and f32)\n");
}

// ---- GEMM epilogues ----------------------------------------------------------------------------

// A linear layer's forward x W^T + b, and GELU of it, three ways alternated sample by sample: the
// GEMM started from the bias with GELU in its epilogue (fusion on), the GEMM started from the bias
// then the GELU op, and the rows filled with b, the GEMM adding to them, then the GELU op (fusion
// off). GFLOP/s of the product alone; `check`: the three agree to the bit.
void run_epilogue(const std::string& name, int64_t m, int64_t k, int64_t n, double fma_gflops, rg::Generator& gen,
                  const Options& opt) {
  namespace native = rg::native;
  const rg::Tensor x = rg::randn({m, k}, gen), w = rg::randn({n, k}, gen), b = rg::randn({n}, gen);
  const rg::Tensor wt = native::transpose(w, 0, 1);
  const auto fused = [&] {
    rg::Tensor act;
    native::mm_add_row(x, wt, b, &act);
    return act;
  };
  const auto bias_then_gelu = [&] { return native::unary(rg::UnaryOp::gelu, native::mm_add_row(x, wt, b)); };
  const auto composed = [&] {
    return with_fusion(false, [&] {
      rg::Tensor act;
      native::mm_add_row(x, wt, b, &act);
      return act;
    });
  };
  const bool ok =
      fused().to_vector() == composed().to_vector() && bias_then_gelu().to_vector() == composed().to_vector();
  const std::vector<Stats> t = measure({fused, bias_then_gelu, composed}, opt);
  const double flops = 2.0 * static_cast<double>(m) * static_cast<double>(k) * static_cast<double>(n);
  const char* ways[3] = {"gelu epilogue", "bias, gelu op", "fill, gemm, gelu"};
  for (size_t i = 0; i < 3; ++i)
    std::printf("%-12s %-28s %10.3f %10.3f %10.1f %10.1f %7.0f%% %5s %8.2f\n", (name + " " + ways[i]).c_str(),
                (std::to_string(m) + "x" + std::to_string(k) + " @ (" + std::to_string(n) + "x" + std::to_string(k) +
                 ")^T + b")
                    .c_str(),
                t[i].best * 1e3, t[i].median * 1e3, flops / t[i].best / 1e9, flops / t[i].median / 1e9,
                100.0 * flops / t[i].best / 1e9 / fma_gflops, ok ? "ok" : "WRONG", t[2].best / t[i].best);
}

// ---- elementwise -------------------------------------------------------------------------------

struct ElementwiseCase {
  std::string name;
  int inputs;  // tensors read; one tensor is written
  std::function<rg::Tensor(const rg::Tensor&, const rg::Tensor&)> op;
  std::function<float(float, float)> reference;
};

void run_elementwise(const ElementwiseCase& c, const rg::Tensor& x, const rg::Tensor& y, double memcpy_gbs,
                     const Options& opt) {
  const rg::Tensor out = c.op(x, y);
  bool ok = out.shape() == x.shape();
  if (ok) {
    const float *px = x.data<float>(), *py = y.data<float>(), *po = out.data<float>();
    const int64_t n = x.numel();
    for (int64_t i = 0; i < n && ok; i += 4093) {  // a stride through the whole tensor
      const float want = c.reference(px[i], py[i]);
      ok = std::fabs(po[i] - want) <= 1e-5f * (1.0f + std::fabs(want));
    }
  }
  const Stats t = measure({[&] { c.op(x, y); }}, opt)[0];
  const double bytes = static_cast<double>(c.inputs + 1) * static_cast<double>(x.nbytes());
  const double best = bytes / t.best / 1e9, median = bytes / t.median / 1e9;
  std::printf("%-12s %-28s %10.3f %10.3f %10.2f %10.2f %7.0f%% %5s\n", c.name.c_str(),
              (rg::shape_str(x.shape()) + " f32").c_str(), t.best * 1e3, t.median * 1e3, best, median,
              100.0 * best / memcpy_gbs, ok ? "ok" : "WRONG");
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  if (const auto code = parse_options(argc, argv, opt)) return *code;
  try {
    if (opt.threads > 0) rg::set_num_threads(opt.threads);
    std::printf("# micro_ops: threads %d (cblas_sgemm below: OpenBLAS with as many threads), repeat %d, warmup %d\n",
                rg::num_threads(), opt.repeat, opt.warmup);
    std::printf("# OpenBLAS: %s\n", openblas_get_config());
    std::printf("# cpu isa: %s\n", rg::cpu_isa_name(rg::cpu_isa()));
    rg::Generator gen(/*seed=*/1234);

    // ---- ceilings, measured first ----
    const GemmCase peak_case{"blas peak", 2048, 2048, 2048, false, false};
    std::vector<float> pa(2048 * 2048, 0.5f), pb(2048 * 2048, 0.25f), pc(2048 * 2048);
    const Stats peak_t = measure({[&] { cblas(peak_case, pa.data(), pb.data(), pc.data()); }}, opt)[0];
    const double peak_gflops = 2.0 * 2048.0 * 2048.0 * 2048.0 / peak_t.best / 1e9;
    const Stats memcpy_gbs = memcpy_bandwidth(opt);
    std::printf("# ceiling: cblas_sgemm 2048x2048 @ 2048x2048: best %.1f GFLOP/s, median %.1f GFLOP/s\n", peak_gflops,
                2.0 * 2048.0 * 2048.0 * 2048.0 / peak_t.median / 1e9);
    std::printf("# ceiling: std::memcpy 256 MiB, one core:    best %.2f GB/s, median %.2f GB/s (read + write)\n",
                memcpy_gbs.best, memcpy_gbs.median);
    // The FMA peak of as many threads as ringgrad uses, for each ISA this CPU has; the widest is the
    // ceiling every GFLOP/s below is a share of.
    double fma_gflops = 0;
    for (fma_peak::Isa isa : {fma_peak::Isa::avx2, fma_peak::Isa::avx512}) {
      if (!fma_peak::cpu_has(isa)) {
        std::printf("# ceiling: FMA peak %s: not supported by this CPU\n", fma_peak::isa_name(isa));
        continue;
      }
      const int threads = rg::num_threads();
      fma_gflops = fma_peak::measure_gflops(isa, threads, std::max(3, opt.repeat / 3));
      std::printf("# ceiling: FMA peak %s, %d thread%s: best %.1f GFLOP/s (%.1f per thread)\n", fma_peak::isa_name(isa),
                  threads, threads == 1 ? "" : "s", fma_gflops, fma_gflops / threads);
    }
    if (fma_gflops > 0)
      std::printf("# reference: cblas_sgemm 2048^3 reaches %.0f%% of the FMA peak\n", 100.0 * peak_gflops / fma_gflops);
    // The ceiling of the bf16 products where they run on the dot-product instruction.
    double bf16_dot_gflops = 0;
    if (fma_peak::cpu_has(fma_peak::Isa::avx512_bf16)) {
      const int threads = rg::num_threads();
      bf16_dot_gflops = fma_peak::measure_gflops(fma_peak::Isa::avx512_bf16, threads, std::max(3, opt.repeat / 3));
      std::printf("# ceiling: bf16 dot-product peak (AVX512_BF16), %d thread%s: best %.1f GFLOP/s (%.1f per thread)\n",
                  threads, threads == 1 ? "" : "s", bf16_dot_gflops, bf16_dot_gflops / threads);
    }
    std::printf("# bf16 products: %s\n", rg::cpu_has_bf16_dot() ? "AVX512_BF16 dot products, f32 accumulation"
                                                                : "computed in f32 (no AVX512_BF16 selected)");
    // The bf16 column's ceiling: the dot-product peak where bf16 products use it, else the FMA peak.
    const double bf16_peak = rg::cpu_has_bf16_dot() ? bf16_dot_gflops : fma_gflops;
    if (opt.ceilings_only) return 0;

    // ---- GEMM ----
    if (opt.only == "all" || opt.only == "gemm") {
      std::printf("\n");
      std::printf("%-12s %-28s %10s %10s %10s %10s %10s %8s %8s %5s %10s %8s %8s %10s %8s\n", "gemm", "shape",
                  "best_ms", "median_ms", "GFLOP/s", "med_GF/s", "blas_GF/s", "vs_blas", "of_fma", "check", "bf16_GF/s",
                  "vs_f32", "of_peak", "f16_GF/s", "vs_casts");
      print_rule();
    }
    std::vector<GemmCase> gemms;
    for (int64_t s : {128, 256, 512, 1024, 2048}) gemms.push_back({"square", s, s, s, false, false});
    // W1 (784-512-512-10, batch 128): linear(x, w) = x @ w^T with w stored (out, in).
    gemms.push_back({"fc1 fwd", 128, 784, 512, false, true});  // x (128, 784) @ w1^T
    gemms.push_back({"fc2 fwd", 128, 512, 512, false, true});  // h1 (128, 512) @ w2^T
    gemms.push_back({"fc3 fwd", 128, 512, 10, false, true});   // h2 (128, 512) @ w3^T
    gemms.push_back({"fc2 dx", 128, 512, 512, false, false});  // dh2 (128, 512) @ w2
    gemms.push_back({"fc1 dw", 512, 128, 784, true, false});   // dh1^T (512, 128) @ x (128, 784)
    // W3 GPT-mini (n_embd 128, 16 x 128 tokens, 4 heads of 32): products of K <= 384 run on
    // ringgrad's own kernel (Note [Our own GEMM for short products]), the longer ones on OpenBLAS.
    gemms.push_back({"attn fwd", 2048, 128, 384, false, true});  // x (2048, 128) @ w_attn^T
    gemms.push_back({"mlp dx", 2048, 512, 128, false, false});   // dh (2048, 512) @ w_proj (512, 128)
    gemms.push_back({"attn dx", 2048, 384, 128, false, false});  // dqkv (2048, 384) @ w_attn (384, 128)
    gemms.push_back({"head q k^T", 128, 32, 128, false, true});  // q (128, 32) @ k^T
    gemms.push_back({"head p v", 128, 128, 32, false, false});   // p (128, 128) @ v (128, 32)
    gemms.push_back({"attn dw", 384, 2048, 128, true, false});   // dqkv^T (384, 2048) @ x: OpenBLAS
    // W2 CNN, one sample's products of the second convolution (32 -> 64 channels, 3x3, 14 x 14):
    // w (64, 288) @ cols (288, 196), dy (64, 196) @ cols^T, w^T @ dy (Note [Convolution one sample
    // at a time]); and the first convolution's (1 -> 32, K = 9, 28 x 28).
    gemms.push_back({"conv2 fwd", 64, 288, 196, false, false});
    gemms.push_back({"conv2 dw", 64, 196, 288, false, true});
    gemms.push_back({"conv2 dcols", 288, 64, 196, true, false});
    gemms.push_back({"conv1 fwd", 32, 9, 784, false, false});
    gemms.push_back({"conv1 dw", 32, 784, 9, false, true});
    gemms.push_back({"conv2 fwd^T", 196, 288, 64, true, true});
    gemms.push_back({"conv1 dw^T", 9, 784, 32, false, true});
    gemms.push_back({"conv1 fwd^T", 784, 9, 32, true, true});
    if (opt.only == "all" || opt.only == "gemm")
      for (const GemmCase& c : gemms) run_gemm(c, fma_gflops, bf16_peak, gen, opt);

    // ---- attention ----
    if (opt.only == "all" || opt.only == "attention") {
      std::printf("\n");
      std::printf("%-12s %-28s %10s %10s %10s %10s %8s %5s %8s\n", "attention", "shape", "best_ms", "median_ms",
                  "GFLOP/s", "med_GF/s", "of_fma", "check", "vs_plain");
      print_rule();
      run_attention(16, 128, 4, 32, fma_gflops, gen, opt);  // W3
      run_attention(4, 256, 4, 64, fma_gflops, gen, opt);   // longer sequences, wider heads
    }

    // ---- GEMM epilogues ----
    if (opt.only == "all" || opt.only == "epilogue") {
      std::printf("\n");
      std::printf("%-12s %-28s %10s %10s %10s %10s %8s %5s %8s\n", "epilogue", "shape", "best_ms", "median_ms",
                  "GFLOP/s", "med_GF/s", "of_fma", "check", "vs_fill");
      print_rule();
      run_epilogue("c_fc", 2048, 128, 512, fma_gflops, gen, opt);  // W3's MLP input projection
    }
    if (opt.only != "all" && opt.only != "elementwise") return 0;

    // ---- elementwise, memory bound ----
    std::printf("\n");
    std::printf("%-12s %-28s %10s %10s %10s %10s %8s %5s\n", "elementwise", "shape", "best_ms", "median_ms", "GB/s",
                "med_GB/s", "of_memcpy", "check");
    print_rule();
    const int64_t n = (int64_t{64} << 20) / 4;  // 64 MiB of f32
    const rg::Tensor x = rg::randn({n}, gen);
    const rg::Tensor y = rg::randn({n}, gen);
    const std::vector<ElementwiseCase> elementwise = {
        {"add", 2, [](const rg::Tensor& a, const rg::Tensor& b) { return rg::add(a, b); },
         [](float a, float b) { return a + b; }},
        {"mul", 2, [](const rg::Tensor& a, const rg::Tensor& b) { return rg::mul(a, b); },
         [](float a, float b) { return a * b; }},
        {"exp", 1, [](const rg::Tensor& a, const rg::Tensor&) { return rg::exp(a); },
         [](float a, float) { return std::exp(a); }},
    };
    for (const ElementwiseCase& c : elementwise) run_elementwise(c, x, y, memcpy_gbs.best, opt);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "micro_ops: %s\n", e.what());
    return 1;
  }
  return 0;
}
