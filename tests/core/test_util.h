// Helpers shared by the ringgrad tests.
//
// The tests compare the library against something independent of it: values computed here in double
// precision, closed forms, published vectors. So test data comes from TestRng (SplitMix64, written
// below), never from the library's own generator, and expected values are computed in the test.
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <sstream>
#include <string>
#include <vector>

#include "ringgrad.h"

namespace rgtest {

using ringgrad::DType;
using ringgrad::Shape;
using ringgrad::Tensor;

// SplitMix64 (Steele, Lea, Flood 2014): deterministic test data that does not depend on core/random.h.
class TestRng {
 public:
  explicit TestRng(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform(double lo, double hi) { return lo + (hi - lo) * static_cast<double>(next() >> 11) * 0x1.0p-53; }

 private:
  uint64_t state_;
};

inline std::vector<double> random_values(size_t n, uint64_t seed, double lo = -1.0, double hi = 1.0) {
  TestRng rng(seed);
  std::vector<double> v(n);
  for (double& x : v) x = rng.uniform(lo, hi);
  return v;
}

// Values with |v| in [gap, gap + span] and a random sign: keeps inputs away from kinks at 0.
inline std::vector<double> values_away_from_zero(size_t n, uint64_t seed, double gap = 0.2, double span = 1.0) {
  TestRng rng(seed);
  std::vector<double> v(n);
  for (double& x : v) {
    const double magnitude = gap + rng.uniform(0.0, span);
    x = (rng.next() & 1) ? magnitude : -magnitude;
  }
  return v;
}

// The values rounded to f32, as an f32 tensor holds them.
inline std::vector<double> round_to_f32(std::vector<double> v) {
  for (double& x : v) x = static_cast<double>(static_cast<float>(x));
  return v;
}

inline Tensor make(const std::vector<double>& values, const Shape& shape, DType dtype = DType::f32) {
  return ringgrad::from_vector(values, shape, ringgrad::TensorOptions{.dtype = dtype});
}

inline Tensor make_i64(const std::vector<int64_t>& values, const Shape& shape) {
  return ringgrad::from_vector(values, shape, ringgrad::TensorOptions{.dtype = DType::i64});
}

inline Tensor random_tensor(const Shape& shape, uint64_t seed, double lo = -1.0, double hi = 1.0,
                            DType dtype = DType::f32) {
  return make(random_values(static_cast<size_t>(ringgrad::shape_numel(shape)), seed, lo, hi), shape, dtype);
}

// Row-major flat index of `index` in `shape`.
inline int64_t flat_index(const Shape& shape, const std::vector<int64_t>& index) {
  int64_t flat = 0;
  for (size_t d = 0; d < shape.size(); ++d) flat = flat * shape[d] + index[d];
  return flat;
}

// Empty when `t` has `shape` and |t[i] - expected[i]| <= atol + rtol * |expected[i]| everywhere
// (NaN matches NaN, infinities match exactly); otherwise a description of the worst element.
inline std::string compare_values(const Tensor& t, const Shape& shape, const std::vector<double>& expected, double atol,
                                  double rtol) {
  if (!t.defined()) return "tensor is undefined";
  if (t.shape() != shape) return "shape " + ringgrad::shape_str(t.shape()) + ", expected " + ringgrad::shape_str(shape);
  if (static_cast<size_t>(t.numel()) != expected.size()) return "test bug: expected.size() != numel";
  const std::vector<double> got = t.to_vector();
  if (got.size() != expected.size()) return "to_vector() returned the wrong number of elements";
  size_t bad = 0, worst = 0;
  double worst_excess = -1;
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = got[i], w = expected[i];
    bool ok;
    double excess = 0;
    if (std::isnan(w) || std::isnan(g)) {
      ok = std::isnan(w) && std::isnan(g);
      excess = ok ? 0 : INFINITY;
    } else if (std::isinf(w) || std::isinf(g)) {
      ok = g == w;
      excess = ok ? 0 : INFINITY;
    } else {
      const double err = std::fabs(g - w), tol = atol + rtol * std::fabs(w);
      ok = err <= tol;
      excess = err - tol;
    }
    if (!ok) {
      ++bad;
      if (excess > worst_excess) {
        worst_excess = excess;
        worst = i;
      }
    }
  }
  if (bad == 0) return "";
  std::ostringstream os;
  os.precision(17);
  os << bad << " of " << got.size() << " elements differ (atol " << atol << ", rtol " << rtol
     << "); worst at flat index " << worst << ": got " << got[worst] << ", expected " << expected[worst];
  return os.str();
}

// Empty when `fn` throws ringgrad::Error whose message contains every one of `parts`.
inline std::string error_problem(const std::function<void()>& fn, std::initializer_list<std::string> parts) {
  std::string message;
  try {
    fn();
    return "no exception was thrown";
  } catch (const ringgrad::Error& e) {
    message = e.what();
  } catch (const std::exception& e) {
    return std::string("threw a std::exception that is not ringgrad::Error: ") + e.what();
  }
  std::string missing;
  for (const std::string& part : parts)
    if (message.find(part) == std::string::npos) missing += " \"" + part + "\"";
  if (missing.empty()) return "";
  return "message \"" + message + "\" lacks" + missing;
}

inline bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// Selects a CPU kernel ISA (core/cpu_isa.h) for one scope and restores the previous selection after it.
struct IsaScope {
  ringgrad::CpuIsa before = ringgrad::cpu_isa();
  explicit IsaScope(ringgrad::CpuIsa isa) { ringgrad::set_cpu_isa(isa); }
  ~IsaScope() { ringgrad::set_cpu_isa(before); }
};

// Sets the compute pool's size (core/parallel.h) for one scope and restores the previous size after it.
struct ThreadsScope {
  int before = ringgrad::num_threads();
  explicit ThreadsScope(int n) { ringgrad::set_num_threads(n); }
  ~ThreadsScope() { ringgrad::set_num_threads(before); }
};

// Turns fusion (core/fusion.h) on or off for one scope and restores the previous setting after it.
struct FusionScope {
  bool before = ringgrad::fusion_enabled();
  explicit FusionScope(bool on) { ringgrad::set_fusion(on); }
  ~FusionScope() { ringgrad::set_fusion(before); }
};

// The ISAs this CPU runs, to test `what` on each; the AVX-512 cases are skipped, saying so, where the
// CPU lacks AVX-512F.
inline std::vector<ringgrad::CpuIsa> isas_to_test(const char* what) {
  std::vector<ringgrad::CpuIsa> isas{ringgrad::CpuIsa::avx2};
  if (ringgrad::cpu_supports(ringgrad::CpuIsa::avx512)) isas.push_back(ringgrad::CpuIsa::avx512);
  else MESSAGE("this CPU has no AVX-512F: the AVX-512 path of " << what << " is not tested here");
  return isas;
}

}  // namespace rgtest

// CHECK_VALUES(tensor, shape, expected, atol, rtol): shape and every element within tolerance.
#define CHECK_VALUES(t, shape, expected, atol, rtol)                                                 \
  do {                                                                                               \
    const std::string rg_diff_ = ::rgtest::compare_values((t), (shape), (expected), (atol), (rtol)); \
    CHECK_MESSAGE(rg_diff_.empty(), rg_diff_);                                                       \
  } while (0)

// CHECK_ERROR(callable, "part", ...): the callable throws ringgrad::Error mentioning every part.
// Pass a named lambda (braces inside a lambda body would split the macro arguments).
#define CHECK_ERROR(fn, ...)                                                      \
  do {                                                                            \
    const std::string rg_problem_ = ::rgtest::error_problem((fn), {__VA_ARGS__}); \
    CHECK_MESSAGE(rg_problem_.empty(), rg_problem_);                              \
  } while (0)
