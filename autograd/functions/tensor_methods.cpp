// Tensor's autograd accessors, in-place ops and the math methods that forward to core/ops.h.
#include "autograd/engine.h"
#include "core/native/native.h"
#include "core/ops.h"

namespace ringgrad {

using autograd::autograd_meta;

// ---- autograd state -------------------------------------------------------------------------------
bool Tensor::requires_grad() const {
  const auto& meta = checked()->autograd;
  return meta && (meta->requires_grad || meta->grad_fn);
}

Tensor& Tensor::requires_grad_(bool enabled) {
  RG_CHECK(!enabled || is_floating(dtype()), "requires_grad_",
           "only floating-point tensors can require gradients, got ", desc());
  RG_CHECK(is_leaf(), "requires_grad_", "can only be set on leaf tensors; this one is the result of ",
           grad_fn()->name(), " (use detach() for a new leaf)");
  autograd_meta(*this).requires_grad = enabled;
  return *this;
}

bool Tensor::is_leaf() const {
  const auto& meta = checked()->autograd;
  return !meta || !meta->grad_fn;
}

std::shared_ptr<autograd::Node> Tensor::grad_fn() const {
  const auto& meta = checked()->autograd;
  return meta ? meta->grad_fn : nullptr;
}

Tensor Tensor::grad() const {
  const auto& meta = checked()->autograd;
  return meta ? meta->grad : Tensor();
}

void Tensor::set_grad(const Tensor& grad) {
  RG_CHECK(!grad.defined() || (grad.shape() == shape() && grad.device() == device()), "set_grad", "gradient ",
           grad.desc(), " does not match tensor ", desc());
  autograd_meta(*this).grad = grad;
}

void Tensor::zero_grad(bool set_to_none) {
  if (!checked()->autograd || !checked()->autograd->grad.defined()) return;
  if (set_to_none) checked()->autograd->grad = Tensor();
  else checked()->autograd->grad.zero_();
}

Tensor Tensor::detach() const { return make_view(storage(), shape(), strides(), offset(), dtype()); }

void Tensor::backward(const Tensor& grad, bool retain_graph) const {
  autograd::backward({*this}, {grad}, retain_graph);
}

int Tensor::register_post_accumulate_grad_hook(std::function<void(Tensor&)> hook) {
  RG_CHECK(is_leaf() && requires_grad(), "register_post_accumulate_grad_hook",
           "hooks fire when a leaf's gradient is accumulated; ", desc(),
           is_leaf() ? " does not require grad" : " is not a leaf");
  auto& meta = autograd_meta(*this);
  const int handle = meta.next_hook_handle++;
  meta.post_accumulate_grad_hooks.emplace_back(handle, std::move(hook));
  return handle;
}

void Tensor::remove_post_accumulate_grad_hook(int handle) {
  auto& hooks = autograd_meta(*this).post_accumulate_grad_hooks;
  std::erase_if(hooks, [handle](const auto& h) { return h.first == handle; });
}

void Tensor::retain_grad() {
  if (is_leaf()) return;  // leaves keep their gradient anyway
  auto& meta = autograd_meta(*this);
  if (meta.retains_grad) return;
  meta.retains_grad = true;
  meta.grad_fn->retained_grads.emplace_back(meta.output_nr, impl_);
}

// ---- in-place ops: for optimizers and initialisers, never recorded by autograd --------------------
namespace {
void check_inplace(const char* op, const Tensor& self) {
  RG_CHECK(!(autograd::grad_enabled() && self.requires_grad()), op, "in-place operation on ", self.desc(),
           " which requires grad; autograd does not record in-place ops: wrap the update in NoGradGuard");
}
}  // namespace

Tensor& Tensor::fill_(double value) {
  check_inplace("fill_", *this);
  native::unary_(UnaryOp::fill, *this, {value, 0});
  return *this;
}
Tensor& Tensor::zero_() { return fill_(0.0); }
Tensor& Tensor::copy_(const Tensor& src) {
  check_inplace("copy_", *this);
  native::copy_(*this, src);
  return *this;
}
Tensor& Tensor::add_(const Tensor& other, double alpha) {
  check_inplace("add_", *this);
  native::binary_(BinaryOp::add, *this, alpha == 1.0 ? other : native::unary(UnaryOp::affine, other, {alpha, 0}));
  return *this;
}
Tensor& Tensor::sub_(const Tensor& other) {
  check_inplace("sub_", *this);
  native::binary_(BinaryOp::sub, *this, other);
  return *this;
}
Tensor& Tensor::mul_(const Tensor& other) {
  check_inplace("mul_", *this);
  native::binary_(BinaryOp::mul, *this, other);
  return *this;
}
Tensor& Tensor::div_(const Tensor& other) {
  check_inplace("div_", *this);
  native::binary_(BinaryOp::div, *this, other);
  return *this;
}
Tensor& Tensor::add_(double value) {
  check_inplace("add_", *this);
  native::unary_(UnaryOp::affine, *this, {1.0, value});
  return *this;
}
Tensor& Tensor::mul_(double value) {
  check_inplace("mul_", *this);
  native::unary_(UnaryOp::affine, *this, {value, 0.0});
  return *this;
}
void Tensor::move_into(const Tensor& place) {
  RG_CHECK(place.defined() && place.shape() == shape() && place.dtype() == dtype() && place.device() == device(),
           "move_into", "the new place ", place.defined() ? place.desc() : std::string("(undefined)"),
           " must have the shape, dtype and device of ", desc());
  if (place.storage() == storage() && place.offset() == offset() && place.strides() == strides()) return;
  native::copy_(place, *this);  // not through copy_: moving a parameter is not an update autograd should refuse
  TensorImpl& self = *checked();
  self.storage = place.storage();
  self.strides = place.strides();
  self.offset = place.offset();
}

Tensor& Tensor::clamp_(double lo, double hi) {
  check_inplace("clamp_", *this);
  native::unary_(UnaryOp::clamp, *this, {lo, hi});
  return *this;
}

// ---- math methods -----------------------------------------------------------------------------------
Tensor Tensor::sum(const Shape& dims, bool keepdim) const { return ringgrad::sum(*this, dims, keepdim); }
Tensor Tensor::mean(const Shape& dims, bool keepdim) const { return ringgrad::mean(*this, dims, keepdim); }
Tensor Tensor::max(int64_t d, bool keepdim) const { return ringgrad::max(*this, d, keepdim); }
Tensor Tensor::argmax(int64_t d, bool keepdim) const { return ringgrad::argmax(*this, d, keepdim); }
Tensor Tensor::var(const Shape& dims, bool keepdim, bool unbiased) const {
  return ringgrad::var(*this, dims, keepdim, unbiased);
}
Tensor Tensor::exp() const { return ringgrad::exp(*this); }
Tensor Tensor::log() const { return ringgrad::log(*this); }
Tensor Tensor::sqrt() const { return ringgrad::sqrt(*this); }
Tensor Tensor::tanh() const { return ringgrad::tanh(*this); }
Tensor Tensor::sigmoid() const { return ringgrad::sigmoid(*this); }
Tensor Tensor::relu() const { return ringgrad::relu(*this); }
Tensor Tensor::pow(double exponent) const { return ringgrad::pow(*this, exponent); }
Tensor Tensor::abs() const { return ringgrad::abs(*this); }
Tensor Tensor::matmul(const Tensor& other) const { return ringgrad::matmul(*this, other); }
Tensor Tensor::softmax(int64_t d) const { return ringgrad::softmax(*this, d); }
Tensor Tensor::log_softmax(int64_t d) const { return ringgrad::log_softmax(*this, d); }

}  // namespace ringgrad
