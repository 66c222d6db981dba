#include "core/state_dict.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace ringgrad {

std::string LoadResult::describe() const {
  auto line = [](const char* what, const std::vector<std::string>& keys) {
    if (keys.empty()) return std::string();
    std::string s = std::string("\n  ") + what + ": ";
    for (size_t i = 0; i < keys.size(); ++i) s += (i ? ", " : "") + keys[i];
    return s;
  };
  return line("missing keys", missing) + line("unexpected keys", unexpected) + line("shape mismatches", mismatched);
}

const Tensor& state_entry(const StateDict& state, const std::string& name, const std::string& who) {
  auto it = std::find_if(state.begin(), state.end(), [&](const auto& e) { return e.first == name; });
  RG_CHECK(it != state.end(), who, "state entry '", name, "' is missing");
  return it->second;
}

int64_t state_int(const StateDict& state, const std::string& name, const std::string& who) {
  const Tensor& t = state_entry(state, name, who);
  RG_CHECK(t.numel() == 1, who, "state entry '", name, "' should hold one value, got ", t.desc());
  const Tensor host = t.to(Device::cpu());
  // Read integers exactly (seeds and offsets use all 64 bits; a double holds 53).
  if (host.dtype() == DType::i64) return *host.data<int64_t>();  // one element: raw_data points at it
  const double v = host.item();
  // [-2^63, 2^63): the doubles that convert to an int64 (outside, the conversion is undefined).
  RG_CHECK(std::isfinite(v) && v == std::floor(v) && v >= -0x1p63 && v < 0x1p63, who, "state entry '", name,
           "' should be a 64-bit integer, got ", v);
  return static_cast<int64_t>(v);
}

StateDict with_prefix_removed(const StateDict& state, const std::string& prefix) {
  StateDict out;
  for (const auto& [name, t] : state)
    if (name.rfind(prefix, 0) == 0) out.emplace_back(name.substr(prefix.size()), t);
  return out;
}

StateDict with_prefix(const StateDict& entries, const std::string& prefix) {
  StateDict out;
  for (const auto& [name, t] : entries) out.emplace_back(prefix + name, t);
  return out;
}

}  // namespace ringgrad
