// Factories (empty, zeros, arange, from host data, random) and the comparison helpers tests use.
#include <cmath>
#include <cstring>

#include "core/native/native.h"
#include "core/ops.h"
#include "core/parallel.h"

namespace ringgrad {
namespace {

Tensor finish(Tensor t, const TensorOptions& options) {
  if (options.requires_grad) t.requires_grad_(true);
  return t;
}

// Builds a host f64 tensor from a generator function, then converts to the requested dtype and device.
template <class Fn>
Tensor host_f64(const Shape& shape, Fn&& value_at) {
  Tensor t = native::empty(shape, DType::f64, Device::cpu());
  double* p = t.data<double>();
  parallel_for(t.numel(), 16384, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) p[i] = value_at(i);
  });
  return t;
}

Tensor convert(const Tensor& host, const TensorOptions& options) {
  Tensor out = native::empty(host.shape(), options.dtype.value_or(DType::f32), options.device);
  native::copy_(out, host);
  return finish(out, options);
}

}  // namespace

Tensor empty(const Shape& shape, TensorOptions options) {
  return finish(native::empty(shape, options.dtype.value_or(DType::f32), options.device), options);
}

Tensor full(const Shape& shape, double value, TensorOptions options) {
  Tensor t = native::empty(shape, options.dtype.value_or(DType::f32), options.device);
  t.fill_(value);
  return finish(t, options);
}

Tensor zeros(const Shape& shape, TensorOptions options) { return full(shape, 0.0, options); }
Tensor ones(const Shape& shape, TensorOptions options) { return full(shape, 1.0, options); }
Tensor scalar_tensor(double value, TensorOptions options) { return full({}, value, options); }
Tensor zeros_like(const Tensor& t) { return zeros(t.shape(), {.dtype = t.dtype(), .device = t.device()}); }
Tensor ones_like(const Tensor& t) { return ones(t.shape(), {.dtype = t.dtype(), .device = t.device()}); }
Tensor empty_like(const Tensor& t) { return empty(t.shape(), {.dtype = t.dtype(), .device = t.device()}); }

Tensor arange(double start, double end, double step, TensorOptions options) {
  RG_CHECK(step != 0, "arange", "step must be non-zero");
  const double count = std::ceil((end - start) / step);
  const int64_t n = count > 0 ? static_cast<int64_t>(count) : 0;
  return convert(host_f64({n}, [&](int64_t i) { return start + static_cast<double>(i) * step; }), options);
}

Tensor from_vector(const std::vector<double>& values, const Shape& shape, TensorOptions options) {
  RG_CHECK(static_cast<int64_t>(values.size()) == shape_numel(shape), "from_vector", values.size(),
           " values do not fill shape ", shape_str(shape));
  if (!options.dtype) options.dtype = DType::f32;
  return from_blob(values.data(), shape, DType::f64, options);
}
Tensor from_vector(const std::vector<float>& values, const Shape& shape, TensorOptions options) {
  RG_CHECK(static_cast<int64_t>(values.size()) == shape_numel(shape), "from_vector", values.size(),
           " values do not fill shape ", shape_str(shape));
  return from_blob(values.data(), shape, DType::f32, options);
}
Tensor from_vector(const std::vector<int64_t>& values, const Shape& shape, TensorOptions options) {
  RG_CHECK(static_cast<int64_t>(values.size()) == shape_numel(shape), "from_vector", values.size(),
           " values do not fill shape ", shape_str(shape));
  if (!options.dtype) options.dtype = DType::i64;
  return from_blob(values.data(), shape, DType::i64, options);
}

Tensor from_blob(const void* data, const Shape& shape, DType dtype, TensorOptions options) {
  if (!options.dtype) options.dtype = dtype;  // a blob keeps its own dtype unless told otherwise
  Tensor host = native::empty(shape, dtype, Device::cpu());
  if (host.nbytes() > 0) std::memcpy(host.raw_data(), data, host.nbytes());  // data may be null when empty
  return convert(host, options);
}

// ---- random -------------------------------------------------------------------------------------
// Element i uses Philox counter (first + i / 4) and word i % 4, so the values do not depend on how
// the loop is split across threads (see core/random.h).
Tensor rand(const Shape& shape, Generator& gen, TensorOptions options) {
  return uniform(shape, 0.0, 1.0, gen, options);
}

namespace {
// The largest value of `dtype` strictly below hi (for hi > lo): uniform draws are clamped to it, since
// rounding lo + (hi - lo) u to a narrow dtype could otherwise produce hi itself.
double largest_below(double hi, DType dtype) {
  Tensor t = native::empty({1}, dtype, Device::cpu());
  t.fill_(hi);
  const double rounded = t.item();
  if (rounded < hi) return rounded;
  switch (dtype) {
    case DType::f64: return std::nextafter(hi, -INFINITY);
    case DType::f32: return std::nextafter(static_cast<float>(rounded), -INFINITY);
    case DType::f16:
    case DType::bf16: {
      uint16_t* bits = static_cast<uint16_t*>(t.raw_data());
      *bits = (*bits & 0x8000) ? static_cast<uint16_t>(*bits + 1) : static_cast<uint16_t>(*bits - 1);
      return t.item();
    }
    default: return hi;  // integer dtypes truncate toward zero anyway
  }
}
}  // namespace

Tensor uniform(const Shape& shape, double lo, double hi, Generator& gen, TensorOptions options) {
  RG_CHECK(lo <= hi, "uniform", "lo ", lo, " > hi ", hi);
  const double cap = lo < hi ? largest_below(hi, options.dtype.value_or(DType::f32)) : hi;
  const uint64_t first = gen.advance((static_cast<uint64_t>(shape_numel(shape)) + 3) / 4);
  const uint64_t key = gen.seed();
  return convert(host_f64(shape,
                          [&](int64_t i) {
                            const Philox4x32 r = philox4x32(first + static_cast<uint64_t>(i) / 4, 0, key);
                            return std::min(cap, lo + (hi - lo) * static_cast<double>(uint_to_unit_float(r.v[i % 4])));
                          }),
                 options);
}

Tensor normal(const Shape& shape, double mean, double std, Generator& gen, TensorOptions options) {
  const uint64_t first = gen.advance((static_cast<uint64_t>(shape_numel(shape)) + 3) / 4);
  const uint64_t key = gen.seed();
  return convert(host_f64(shape,
                          [&](int64_t i) {
                            // Box-Muller on words (0, 1) and (2, 3) of the counter: two normals per pair.
                            const Philox4x32 r = philox4x32(first + static_cast<uint64_t>(i) / 4, 0, key);
                            const int pair = (i % 4) / 2;
                            const double u1 = (static_cast<double>(r.v[2 * pair]) + 1.0) / 4294967296.0;  // (0, 1]
                            const double u2 = static_cast<double>(r.v[2 * pair + 1]) / 4294967296.0;
                            const double radius = std::sqrt(-2.0 * std::log(u1));
                            const double angle = 2.0 * M_PI * u2;
                            const double z = (i % 2 == 0) ? radius * std::cos(angle) : radius * std::sin(angle);
                            return mean + std * z;
                          }),
                 options);
}

Tensor randn(const Shape& shape, Generator& gen, TensorOptions options) {
  return normal(shape, 0.0, 1.0, gen, options);
}

Tensor bernoulli(const Shape& shape, double p, Generator& gen, TensorOptions options) {
  RG_CHECK(p >= 0 && p <= 1, "bernoulli", "probability must be in [0, 1], got ", p);
  const uint64_t first = gen.advance((static_cast<uint64_t>(shape_numel(shape)) + 3) / 4);
  const uint64_t key = gen.seed();
  return convert(host_f64(shape,
                          [&](int64_t i) {
                            const Philox4x32 r = philox4x32(first + static_cast<uint64_t>(i) / 4, 0, key);
                            return static_cast<double>(uint_to_unit_float(r.v[i % 4])) < p ? 1.0 : 0.0;
                          }),
                 options);
}

// ---- comparisons for tests ------------------------------------------------------------------------
bool equal(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape()) return false;
  const std::vector<double> x = a.to_vector(), y = b.to_vector();
  for (size_t i = 0; i < x.size(); ++i)
    if (!(x[i] == y[i] || (std::isnan(x[i]) && std::isnan(y[i])))) return false;
  return true;
}

bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol) {
  if (a.shape() != b.shape()) return false;
  const std::vector<double> x = a.to_vector(), y = b.to_vector();
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i]) || std::isnan(y[i])) return false;
    if (x[i] == y[i]) continue;  // equal infinities
    if (!(std::abs(x[i] - y[i]) <= atol + rtol * std::abs(y[i]))) return false;
  }
  return true;
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  RG_CHECK(a.shape() == b.shape(), "max_abs_diff", "shapes differ: a ", a.desc(), ", b ", b.desc());
  const std::vector<double> x = a.to_vector(), y = b.to_vector();
  double m = 0;
  for (size_t i = 0; i < x.size(); ++i) m = std::max(m, std::abs(x[i] - y[i]));
  return m;
}

}  // namespace ringgrad

namespace ringgrad {

Generator& default_generator() {
  static Generator generator(0);
  return generator;
}

namespace {

struct DropoutStreamState {
  DropoutStreams streams = DropoutStreams::per_rank;
  int rank = 0;
};

DropoutStreamState& dropout_state() {
  static DropoutStreamState state;
  return state;
}

void reseed_dropout_stream() {
  dropout_generator().manual_seed(dropout_seed(default_generator().seed(), dropout_state().rank));
}

}  // namespace

uint64_t dropout_seed(uint64_t seed, int rank) {
  if (dropout_state().streams == DropoutStreams::same_on_every_rank) return seed;
  // One Philox evaluation keyed by the seed: unrelated 64-bit seeds for neighbouring ranks, and
  // rank 0's stream differs from the default generator's own.
  const Philox4x32 r = philox4x32(static_cast<uint64_t>(rank) + 1, 0x64726f706f7574ull /* "dropout" */, seed);
  return (static_cast<uint64_t>(r.v[1]) << 32) | r.v[0];
}

Generator& dropout_generator() {
  static Generator generator(dropout_seed(0, 0));
  return generator;
}

void set_dropout_streams(DropoutStreams streams) {
  dropout_state().streams = streams;
  reseed_dropout_stream();
}

DropoutStreams dropout_streams() { return dropout_state().streams; }

void set_random_rank(int rank) {
  dropout_state().rank = rank;
  reseed_dropout_stream();
}

int random_rank() { return dropout_state().rank; }

void manual_seed(uint64_t seed) {
  default_generator().manual_seed(seed);
  reseed_dropout_stream();
}

}  // namespace ringgrad
