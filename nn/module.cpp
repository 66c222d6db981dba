#include "nn/module.h"

#include <algorithm>
#include <iomanip>
#include <set>
#include <sstream>

#include "autograd/activation_checkpoint.h"
#include "autograd/engine.h"
#include "autograd/node.h"
#include "core/native/native.h"
#include "nn/dtype_hold.h"

namespace ringgrad::nn {

Tensor Module::forward(const Tensor&) {
  RG_FAIL("nn", type_name_, " has no single-tensor forward(); call its own forward overload");
}

namespace {
void check_name(const char* what, const std::string& name, const std::vector<std::pair<std::string, Tensor>>& a,
                const std::vector<std::pair<std::string, Tensor>>& b) {
  RG_CHECK(!name.empty() && name.find('.') == std::string::npos, what, "invalid name '", name,
           "' (must be non-empty, without '.')");
  auto taken = [&](const auto& list) {
    return std::any_of(list.begin(), list.end(), [&](const auto& p) { return p.first == name; });
  };
  RG_CHECK(!taken(a) && !taken(b), what, "name '", name, "' is already registered");
}
}  // namespace

Tensor Module::register_parameter(const std::string& name, Tensor tensor, bool requires_grad) {
  check_name("register_parameter", name, parameters_, buffers_);
  RG_CHECK(tensor.defined(), "register_parameter", "parameter '", name, "' is undefined");
  if (requires_grad) tensor.requires_grad_(true);
  parameters_.emplace_back(name, tensor);
  return tensor;
}

Tensor Module::register_buffer(const std::string& name, Tensor tensor) {
  check_name("register_buffer", name, parameters_, buffers_);
  buffers_.emplace_back(name, tensor);
  return tensor;
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> child) {
  RG_CHECK(child != nullptr, "register_module", "module '", name, "' is null");
  RG_CHECK(!name.empty() && name.find('.') == std::string::npos, "register_module", "invalid name '", name, "'");
  for (const auto& [n, m] : children_)
    RG_CHECK(n != name, "register_module", "name '", name, "' is already registered");
  if (child->parent_ == nullptr) {
    child->parent_ = this;
    child->name_in_parent_ = name;
  }
  children_.emplace_back(name, std::move(child));
}

Module::~Module() {
  for (auto& [name, child] : children_)
    if (child->parent_ == this) child->parent_ = nullptr;
}

int Module::register_forward_pre_hook(ForwardPreHook hook) {
  RG_CHECK(hook != nullptr, "register_forward_pre_hook", "the hook is empty");
  forward_pre_hooks_.emplace_back(next_hook_handle_, std::move(hook));
  return next_hook_handle_++;
}

int Module::register_forward_hook(ForwardHook hook) {
  RG_CHECK(hook != nullptr, "register_forward_hook", "the hook is empty");
  forward_hooks_.emplace_back(next_hook_handle_, std::move(hook));
  return next_hook_handle_++;
}

bool Module::remove_forward_hook(int handle) {
  auto same = [handle](const auto& entry) { return entry.first == handle; };
  const size_t before = forward_pre_hooks_.size() + forward_hooks_.size();
  std::erase_if(forward_pre_hooks_, same);
  std::erase_if(forward_hooks_, same);
  return forward_pre_hooks_.size() + forward_hooks_.size() < before;
}

Tensor Module::operator()(const Tensor& input) {
  try {
    if (forward_pre_hooks_.empty() && forward_hooks_.empty()) return call_forward(input);
    Tensor x = input;
    const auto pre_hooks = forward_pre_hooks_;  // a hook may register or remove hooks
    for (const auto& [handle, hook] : pre_hooks)
      if (Tensor replaced = hook(*this, x); replaced.defined()) x = std::move(replaced);
    Tensor y = call_forward(x);
    const auto hooks = forward_hooks_;
    for (const auto& [handle, hook] : hooks)
      if (Tensor replaced = hook(*this, x, y); replaced.defined()) y = std::move(replaced);
    return y;
  } catch (const Error&) {
    rethrow_with_path();
  }
}

Tensor Module::call_forward(const Tensor& input) {
  // The recompute calls forward() on this module during backward: the module outlives the step.
  if (checkpoint_activations_ && autograd::grad_enabled())
    return autograd::checkpoint([this](const Tensor& x) { return forward(x); }, input);
  return forward(input);
}

std::string Module::path() const {
  std::vector<const std::string*> names;
  for (const Module* m = this; m->parent_ != nullptr; m = m->parent_) names.push_back(&m->name_in_parent_);
  std::string out;
  for (auto it = names.rbegin(); it != names.rend(); ++it) out += (out.empty() ? "" : ".") + **it;
  return out;
}

void Module::rethrow_with_path() const {
  static constexpr const char* kMarker = "\n  in module ";
  try {
    throw;
  } catch (const Error& e) {
    const std::string what = e.what();
    if (what.find(kMarker) != std::string::npos) throw;
    const std::string p = path();
    throw Error(str_cat(what, kMarker, p.empty() ? "(the root)" : "'" + p + "'", " (", type_name_, ")"));
  }
}

void Module::collect(const std::string& prefix, bool recurse, bool buffers,
                     std::vector<std::pair<std::string, Tensor>>& out) const {
  for (const auto& [name, t] : buffers ? buffers_ : parameters_) out.emplace_back(prefix + name, t);
  if (!recurse) return;
  for (const auto& [name, child] : children_) child->collect(prefix + name + ".", true, buffers, out);
}

std::vector<std::pair<std::string, Tensor>> Module::named_parameters(bool recurse) const {
  std::vector<std::pair<std::string, Tensor>> out;
  collect("", recurse, /*buffers=*/false, out);
  return out;
}

std::vector<Tensor> Module::parameters(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [name, t] : named_parameters(recurse)) out.push_back(t);
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::named_buffers(bool recurse) const {
  std::vector<std::pair<std::string, Tensor>> out;
  collect("", recurse, /*buffers=*/true, out);
  return out;
}

int64_t Module::parameter_count() const {
  int64_t n = 0;
  for (const auto& [name, t] : named_parameters()) n += t.numel();
  return n;
}

std::vector<std::pair<std::string, Module*>> Module::named_modules() {
  std::vector<std::pair<std::string, Module*>> out;
  apply([&](const std::string& name, Module& m) { out.emplace_back(name, &m); });
  return out;
}

void Module::apply(const std::function<void(const std::string& name, Module& module)>& fn) {
  // Depth first, this module before its children, children in registration order.
  std::function<void(const std::string&, Module&)> visit = [&](const std::string& prefix, Module& m) {
    fn(prefix, m);
    for (const auto& [name, child] : m.children_) visit(prefix.empty() ? name : prefix + "." + name, *child);
  };
  visit("", *this);
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [name, child] : children_) child->train(on);
}

void assign_in_place(const Tensor& t, const Tensor& value) {
  TensorImpl* impl = t.impl();
  const bool layout_changes = value.dtype() != t.dtype() || value.device() != t.device();
  impl->storage = value.storage();
  impl->shape = value.shape();
  impl->strides = value.strides();
  impl->offset = value.offset();
  impl->dtype = value.dtype();
  if (layout_changes && impl->autograd) impl->autograd->grad = Tensor();
}

void Module::to(Device device) {
  for (const auto& [name, t] : named_parameters()) assign_in_place(t, native::to_device(t, device));
  for (const auto& [name, t] : named_buffers()) assign_in_place(t, native::to_device(t, device));
}

void Module::to(DType dtype) {
  RG_CHECK(is_floating(dtype), "Module::to", "parameters must stay floating-point, got ", dtype_name(dtype));
  // Note [Parameters an optimizer holds]: refuse before converting anything.
  for (const auto& [name, t] : named_parameters()) {
    if (t.dtype() == dtype) continue;
    const std::string holder = dtype_holder(t);
    RG_CHECK(holder.empty(), "Module::to", "parameter '", name, "' of ", type_name_, " (", t.desc(), ") is held by ",
             holder, ", whose state was sized for ", dtype_name(t.dtype()), "; converting it to ", dtype_name(dtype),
             " would leave that state wrong in silence (an f16 / bf16 parameter needs an f32 master copy). "
             "Convert the model first, then build the optimizer");
  }
  for (const auto& [name, t] : named_parameters()) assign_in_place(t, native::cast(t, dtype));
  for (const auto& [name, t] : named_buffers())
    if (is_floating(t.dtype())) assign_in_place(t, native::cast(t, dtype));
}

void Module::zero_grad(bool set_to_none) {
  for (auto& t : parameters()) t.zero_grad(set_to_none);
}

StateDict Module::state_dict() const {
  StateDict out = named_parameters();
  for (auto& entry : named_buffers()) out.push_back(entry);
  return out;
}

LoadResult Module::load_state_dict(const StateDict& state, bool strict) {
  const StateDict mine = state_dict();
  LoadResult result;
  std::set<std::string> given;
  for (const auto& [name, t] : state) given.insert(name);
  for (const auto& [name, t] : mine) {
    if (!given.count(name)) result.missing.push_back(name);
  }
  std::set<std::string> known;
  for (const auto& [name, t] : mine) known.insert(name);
  for (const auto& [name, t] : state) {
    if (!known.count(name)) {
      result.unexpected.push_back(name);
      continue;
    }
    auto it = std::find_if(mine.begin(), mine.end(), [&key = name](const auto& p) { return p.first == key; });
    if (it->second.shape() != t.shape())
      result.mismatched.push_back(name + ": checkpoint " + shape_str(t.shape()) + " vs model " +
                                  shape_str(it->second.shape()));
  }
  const bool keys_differ = !result.missing.empty() || !result.unexpected.empty();
  // strict = false skips keys, never shapes: the hint is only given where it would help.
  RG_CHECK(result.mismatched.empty() && !(strict && keys_differ), "load_state_dict", "state does not match ",
           type_name_, ":", result.describe(),
           result.mismatched.empty() ? "\n  (pass strict = false to load the keys that match and skip the others)"
                                     : "\n  (strict = false skips missing and unexpected keys, not shape mismatches)");
  const bool matched_none = result.unexpected.size() == state.size();
  RG_CHECK(!(matched_none && !state.empty() && !mine.empty()), "load_state_dict", "no key of the state (", state.size(),
           " keys, e.g. '", state.front().first, "') is a key of ", type_name_, " (", mine.size(), " keys, e.g. '",
           mine.front().first, "'): nothing would be loaded; a prefix to remove or add?");
  NoGradGuard no_grad;
  for (const auto& [name, t] : state) {
    auto it = std::find_if(mine.begin(), mine.end(), [&key = name](const auto& p) { return p.first == key; });
    if (it != mine.end()) native::copy_(it->second, t);
  }
  return result;
}

std::string Module::summary() const {
  std::ostringstream os;
  size_t width = 4;
  const auto params = named_parameters();
  for (const auto& [name, t] : params) width = std::max(width, name.size());
  os << type_name_ << "\n";
  // The module tree: each descendant indented by its depth, with the parameters under it.
  const_cast<Module*>(this)->apply([&](const std::string& name, Module& m) {
    if (name.empty()) return;
    const auto depth = static_cast<int>(std::count(name.begin(), name.end(), '.'));
    const std::string leaf = name.substr(name.rfind('.') == std::string::npos ? 0 : name.rfind('.') + 1);
    os << std::string(2 * (depth + 1), ' ') << leaf << " (" << m.type_name() << "): " << m.parameter_count()
       << " parameters\n";
  });
  os << std::left << std::setw(static_cast<int>(width) + 2) << "name" << std::setw(16) << "shape" << std::setw(6)
     << "dtype" << std::right << std::setw(12) << "params"
     << "\n";
  for (const auto& [name, t] : params) {
    os << std::left << std::setw(static_cast<int>(width) + 2) << name << std::setw(16) << shape_str(t.shape())
       << std::setw(6) << dtype_name(t.dtype()) << std::right << std::setw(12) << t.numel() << "\n";
  }
  os << "total parameters: " << parameter_count() << "\n";
  return os.str();
}

}  // namespace ringgrad::nn
