#include "optim/fused.h"

#include <cmath>

#include "core/parallel.h"

namespace ringgrad::optim {

DType state_dtype(DType t) { return t == DType::f64 ? DType::f64 : DType::f32; }
bool needs_master(DType t) { return t == DType::f16 || t == DType::bf16; }

namespace {

constexpr int64_t kGrain = 16384;

void check_dense(const char* op, const Tensor& param, const Tensor& grad) {
  RG_CHECK(param.device().is_cpu() && grad.device() == param.device(), op,
           "the fused update runs on the CPU; got param ", param.desc(), ", grad ", grad.desc());
  RG_CHECK(param.is_contiguous() && grad.is_contiguous() && grad.shape() == param.shape() &&
               grad.dtype() == param.dtype(),
           op, "param ", param.desc(), " and grad ", grad.desc(), " must be dense with one shape and dtype");
}

template <class S>
S* maybe(const Tensor& t) {
  return t.defined() ? static_cast<S*>(t.raw_data()) : nullptr;
}

template <class P, class S>
void sgd_typed(P* param, const P* grad, S* master, S* buf, int64_t n, const SgdHyper& h) {
  const S lr = S(h.lr), mom = S(h.momentum), damp = S(1 - h.dampening), wd = S(h.weight_decay);
  parallel_for(n, kGrain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      S x = master ? master[i] : S(load(param[i]));
      S g = S(load(grad[i])) + wd * x;
      if (buf) {
        buf[i] = h.first_step ? g : mom * buf[i] + damp * g;
        g = h.nesterov ? g + mom * buf[i] : buf[i];
      }
      x -= lr * g;
      if (master) master[i] = x;
      param[i] = store_as<P>(static_cast<compute_t<P>>(x));
    }
  });
}

template <class P, class S>
void adam_typed(P* param, const P* grad, S* master, S* m, S* v, int64_t n, const AdamHyper& h) {
  const S b1 = S(h.beta1), b2 = S(h.beta2), eps = S(h.eps);
  const S bias1 = S(1 - std::pow(h.beta1, static_cast<double>(h.step)));
  const S bias2_sqrt = S(std::sqrt(1 - std::pow(h.beta2, static_cast<double>(h.step))));
  const S step_size = S(h.lr) / bias1;
  const S l2 = h.decoupled_weight_decay ? S(0) : S(h.weight_decay);
  const S decay = h.decoupled_weight_decay ? S(1 - h.lr * h.weight_decay) : S(1);
  parallel_for(n, kGrain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      S x = master ? master[i] : S(load(param[i]));
      const S g = S(load(grad[i])) + l2 * x;
      x *= decay;
      m[i] = b1 * m[i] + (S(1) - b1) * g;
      v[i] = b2 * v[i] + (S(1) - b2) * g * g;
      x -= step_size * m[i] / (std::sqrt(v[i]) / bias2_sqrt + eps);
      if (master) master[i] = x;
      param[i] = store_as<P>(static_cast<compute_t<P>>(x));
    }
  });
}

// Calls fn(P{}, S{}) for the parameter dtype.
template <class Fn>
void dispatch_param(DType t, Fn&& fn) {
  switch (t) {
    case DType::f32: return fn(float{}, float{});
    case DType::f64: return fn(double{}, double{});
    case DType::f16: return fn(Half{}, float{});
    case DType::bf16: return fn(BFloat16{}, float{});
    default: RG_FAIL("optimizer", "parameters must be floating-point, got ", dtype_name(t));
  }
}

}  // namespace

void sgd_update(const Tensor& param, const Tensor& grad, const Tensor& master, const Tensor& momentum,
                const SgdHyper& h) {
  check_dense("sgd", param, grad);
  dispatch_param(param.dtype(), [&](auto p, auto s) {
    using P = decltype(p);
    using S = decltype(s);
    sgd_typed<P, S>(static_cast<P*>(param.raw_data()), static_cast<const P*>(grad.raw_data()), maybe<S>(master),
                    maybe<S>(momentum), param.numel(), h);
  });
}

void adam_update(const Tensor& param, const Tensor& grad, const Tensor& master, const Tensor& exp_avg,
                 const Tensor& exp_avg_sq, const AdamHyper& h) {
  check_dense("adam", param, grad);
  dispatch_param(param.dtype(), [&](auto p, auto s) {
    using P = decltype(p);
    using S = decltype(s);
    adam_typed<P, S>(static_cast<P*>(param.raw_data()), static_cast<const P*>(grad.raw_data()), maybe<S>(master),
                     maybe<S>(exp_avg), maybe<S>(exp_avg_sq), param.numel(), h);
  });
}

}  // namespace ringgrad::optim
