#include "optim/optimizer.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <optional>

#include "autograd/engine.h"
#include "core/native/native.h"
#include "core/ops.h"
#include "core/profiler.h"

namespace ringgrad::optim {

namespace {

std::mutex g_checks_mutex;
std::vector<const StepCheck*> g_checks;  // in registration order

std::vector<Tensor> all_params(const std::vector<ParamGroup>& groups) {
  std::vector<Tensor> out;
  for (const auto& g : groups) out.insert(out.end(), g.params.begin(), g.params.end());
  return out;
}

}  // namespace

Optimizer::Optimizer(std::vector<ParamGroup> groups)
    : groups_(std::move(groups)), dtype_hold_(all_params(groups_), [this] { return "optimizer " + name(); }) {
  RG_CHECK(!groups_.empty(), "optimizer", "needs at least one parameter group");
  for (const auto& g : groups_) {
    RG_CHECK(g.lr >= 0, "optimizer", "learning rate must be >= 0, got ", g.lr);
    for (const auto& p : g.params)
      RG_CHECK(p.defined() && p.is_leaf() && is_floating(p.dtype()), "optimizer",
               "parameters must be floating leaf tensors, got ", p.desc());
  }
}

StepCheckHandle::StepCheckHandle(StepCheck check) : check_(std::move(check)) {
  std::lock_guard<std::mutex> lock(g_checks_mutex);
  g_checks.push_back(&check_);
}

StepCheckHandle::~StepCheckHandle() {
  std::lock_guard<std::mutex> lock(g_checks_mutex);
  g_checks.erase(std::find(g_checks.begin(), g_checks.end(), &check_));
}

void Optimizer::step() {
  std::vector<StepCheck> checks;
  {
    // Copied out, so that a check may register or drop checks (or throw) without the lock held.
    std::lock_guard<std::mutex> lock(g_checks_mutex);
    for (const StepCheck* c : g_checks) checks.push_back(*c);
  }
  for (const StepCheck& check : checks) check(*this);
  // The profiler's row "Adam.step" (phase optimizer), around the update's own ops.
  profiler::PhaseGuard phase(profiler::Phase::optimizer);
  std::optional<profiler::OpScope> op;
  if (profiler::enabled()) op.emplace(name() + ".step");
  update();
}

void Optimizer::zero_grad(bool set_to_none) {
  for (auto& g : groups_)
    for (auto& p : g.params) p.zero_grad(set_to_none);
}

std::vector<Tensor> Optimizer::parameters() const { return all_params(groups_); }

std::vector<Tensor> Optimizer::step_gradients() {
  std::vector<Tensor> grads;
  for (const Tensor& p : parameters())
    if (p.grad().defined()) grads.push_back(p.grad());
  return grads;
}

void Optimizer::for_each_param_with_grad(
    const std::function<void(const ParamGroup&, const Tensor&, const Tensor&, size_t)>& fn) {
  NoGradGuard no_grad;
  size_t index = 0;
  for (const ParamGroup& group : groups_) {
    for (const Tensor& p : group.params) {
      const size_t i = index++;
      Tensor grad = p.grad();
      if (!grad.defined()) continue;
      grad = native::contiguous(grad.dtype() == p.dtype() ? grad : native::cast(grad, p.dtype()));
      fn(group, p, grad, i);
    }
  }
}

void Optimizer::set_lr(double lr) {
  for (auto& g : groups_) g.lr = lr;
}

Tensor find_state(const nn::StateDict& state, const std::string& name, const char* optimizer,
                  const Shape& expected_shape) {
  auto it = std::find_if(state.begin(), state.end(), [&](const auto& p) { return p.first == name; });
  RG_CHECK(it != state.end(), optimizer, "state entry '", name, "' is missing");
  RG_CHECK(it->second.shape() == expected_shape, optimizer, "state entry '", name, "' has shape ",
           shape_str(it->second.shape()), ", expected ", shape_str(expected_shape));
  return it->second;
}

namespace {

// The model's name of each optimizer parameter, in parameters() order.
std::vector<std::string> parameter_names(const Optimizer& opt, const nn::Module& model, const char* who) {
  const auto named = model.named_parameters();
  std::vector<std::string> names;
  size_t index = 0;
  for (const Tensor& p : opt.parameters()) {
    auto it = std::find_if(named.begin(), named.end(), [&](const auto& e) { return e.second.is_same(p); });
    RG_CHECK(it != named.end(), who, "parameter ", index, " of optimizer ", opt.name(), " (", p.desc(),
             ") is not a parameter of the model ", model.type_name(), ", so it has no name to key its state by");
    names.push_back(it->first);
    ++index;
  }
  return names;
}

bool is_index(const std::string& s) { return !s.empty() && std::all_of(s.begin(), s.end(), ::isdigit); }

}  // namespace

nn::StateDict state_dict_by_name(const Optimizer& opt, const nn::Module& model) {
  const std::vector<std::string> names = parameter_names(opt, model, "state_dict_by_name");
  nn::StateDict out;
  for (auto& [key, t] : opt.state_dict()) {
    const size_t dot = key.find('.');
    RG_CHECK(dot != std::string::npos && is_index(key.substr(0, dot)), "state_dict_by_name", "optimizer ", opt.name(),
             " wrote the state entry '", key, "', which is not '<index>.<what>'");
    const size_t i = std::stoul(key.substr(0, dot));
    RG_CHECK(i < names.size(), "state_dict_by_name", "state entry '", key, "' of optimizer ", opt.name(),
             " names parameter ", i, " of ", names.size());
    out.emplace_back(names[i] + key.substr(dot), t);
  }
  const auto& groups = opt.param_groups();
  for (size_t g = 0; g < groups.size(); ++g) {
    const std::string prefix = "param_groups." + std::to_string(g) + ".";
    out.emplace_back(prefix + "lr", scalar_tensor(groups[g].lr, {.dtype = DType::f64}));
    out.emplace_back(prefix + "weight_decay", scalar_tensor(groups[g].weight_decay, {.dtype = DType::f64}));
  }
  return out;
}

void load_state_dict_by_name(Optimizer& opt, const nn::Module& model, const nn::StateDict& state) {
  const char* who = "load_state_dict_by_name";
  const std::vector<std::string> names = parameter_names(opt, model, who);
  std::map<std::string, size_t> index_of;
  for (size_t i = 0; i < names.size(); ++i) index_of[names[i]] = i;
  const size_t num_groups = opt.param_groups().size();
  nn::StateDict by_index;
  std::vector<std::pair<size_t, std::pair<std::string, double>>> group_values;  // (group, (field, value))
  for (const auto& [key, t] : state) {
    if (key.rfind("param_groups.", 0) == 0) {
      const std::string rest = key.substr(13);
      const size_t dot = rest.find('.');
      RG_CHECK(dot != std::string::npos && is_index(rest.substr(0, dot)), who, "state entry '", key,
               "' is not 'param_groups.<g>.<field>'");
      const size_t g = std::stoul(rest.substr(0, dot));
      const std::string field = rest.substr(dot + 1);
      RG_CHECK(g < num_groups, who, "state entry '", key, "' is for group ", g, ", but optimizer ", opt.name(), " has ",
               num_groups, " parameter group(s)");
      RG_CHECK(field == "lr" || field == "weight_decay", who, "state entry '", key, "': unknown group field '", field,
               "'");
      group_values.push_back({g, {field, t.item()}});
      continue;
    }
    // The longest parameter name that, followed by '.', begins the key (names contain dots).
    size_t found = names.size(), name_len = 0;
    for (size_t dot = key.rfind('.'); dot != std::string::npos && dot > 0; dot = key.rfind('.', dot - 1)) {
      auto it = index_of.find(key.substr(0, dot));
      if (it != index_of.end()) {
        found = it->second;
        name_len = dot;
        break;
      }
    }
    if (found < names.size()) {
      by_index.emplace_back(std::to_string(found) + key.substr(name_len), t);
      continue;
    }
    const size_t dot = key.find('.');
    RG_CHECK(dot != std::string::npos && is_index(key.substr(0, dot)) && std::stoul(key.substr(0, dot)) < names.size(),
             who, "state entry '", key, "' names no parameter of the model ", model.type_name(), " that optimizer ",
             opt.name(), " holds (", names.size(), " parameters)");
    by_index.emplace_back(key, t);  // keyed by index: Optimizer::state_dict's own form
  }
  opt.load_state_dict(by_index);  // checks every entry before it changes anything
  for (const auto& [g, field_value] : group_values) {
    ParamGroup& group = opt.param_groups()[g];
    (field_value.first == "lr" ? group.lr : group.weight_decay) = field_value.second;
  }
}

}  // namespace ringgrad::optim
