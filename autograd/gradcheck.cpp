// gradcheck: analytic vector-Jacobian products against central finite differences in double.
#include "autograd/gradcheck.h"

#include <cmath>

#include "autograd/engine.h"
#include "core/native/native.h"
#include "core/ops.h"

namespace ringgrad {
namespace {

// An f64 copy of `t` with the same strides (so non-contiguous inputs stay non-contiguous), unless
// some stride is 0: then perturbing one element would move several, so the copy is dense instead.
Tensor f64_copy_keeping_layout(const Tensor& t) {
  bool has_zero_stride = false;
  int64_t extent = t.numel() ? 1 : 0;
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (t.size(d) > 1 && t.stride(d) == 0) has_zero_stride = true;
    if (t.numel()) extent += (t.size(d) - 1) * t.stride(d);
  }
  if (has_zero_stride || t.is_contiguous()) return native::cast(t, DType::f64);
  auto storage = std::make_shared<Storage>(static_cast<size_t>(extent) * sizeof(double), Device::cpu());
  Tensor out = make_view(storage, t.shape(), t.strides(), 0, DType::f64);
  native::copy_(out, t);
  return out;
}

// Pointer to element `flat` (row-major position) of a CPU f64 tensor with any strides.
double* element(const Tensor& t, int64_t flat) {
  int64_t off = 0;
  for (int64_t d = t.dim() - 1; d >= 0; --d) {
    off += (flat % t.size(d)) * t.stride(d);
    flat /= t.size(d);
  }
  return static_cast<double*>(t.raw_data()) + off;
}

}  // namespace

GradcheckResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                          const std::vector<Tensor>& inputs, GradcheckOptions options) {
  bool any_marked = false;
  for (const Tensor& t : inputs) any_marked |= t.defined() && t.requires_grad();

  std::vector<Tensor> xs;
  std::vector<bool> checked;
  for (const Tensor& t : inputs) {
    const bool floating = t.defined() && is_floating(t.dtype());
    if (!floating) {
      xs.push_back(t);
      checked.push_back(false);
      continue;
    }
    Tensor x = f64_copy_keeping_layout(t.to(Device::cpu()).detach());
    const bool check = any_marked ? t.requires_grad() : true;
    if (check) x.requires_grad_(true);
    xs.push_back(x);
    checked.push_back(check);
  }

  // Analytic: d/dx sum(v * fn(x)) for a fixed random cotangent v.
  Tensor out = fn(xs);
  RG_CHECK(out.defined() && is_floating(out.dtype()), "gradcheck", "fn must return a floating tensor, got ",
           out.desc());
  Generator gen(options.seed);
  Tensor v = randn(out.shape(), gen, {.dtype = DType::f64});
  if (out.requires_grad()) (out.to(DType::f64) * v).sum().backward();

  auto objective = [&]() {
    NoGradGuard no_grad;
    Tensor y = fn(xs).to(DType::f64);
    return (y * v).sum().item();
  };

  GradcheckResult result;
  for (size_t i = 0; i < xs.size(); ++i) {
    if (!checked[i]) continue;
    const Tensor& x = xs[i];
    Tensor analytic = x.grad().defined() ? x.grad().contiguous() : zeros(x.shape(), {.dtype = DType::f64});
    const double* a = analytic.data<double>();
    for (int64_t j = 0; j < x.numel(); ++j) {
      double* p = element(x, j);
      const double saved = *p;
      *p = saved + options.eps;
      const double plus = objective();
      *p = saved - options.eps;
      const double minus = objective();
      *p = saved;
      const double numeric = (plus - minus) / (2 * options.eps);
      const double err = std::abs(a[j] - numeric);
      result.max_abs_error = std::max(result.max_abs_error, err);
      if (result.ok && err > options.atol + options.rtol * std::abs(numeric)) {
        result.ok = false;
        result.message = str_cat("input ", i, " ", inputs[i].desc(), " element ", j, ": analytic ", a[j],
                                 " vs numeric ", numeric, " (|diff| ", err, ")");
      }
    }
  }
  return result;
}

}  // namespace ringgrad
