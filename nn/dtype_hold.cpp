#include "nn/dtype_hold.h"

#include <map>
#include <mutex>

namespace ringgrad::nn {

namespace {

struct Holds {
  std::mutex mutex;
  // A parameter held twice (two optimizers over one model) has two entries.
  std::multimap<const TensorImpl*, const std::function<std::string()>*> by_tensor;
};

Holds& holds() {
  static Holds h;
  return h;
}

}  // namespace

DtypeHold::DtypeHold(const std::vector<Tensor>& params, std::function<std::string()> describe_holder)
    : describe_(std::move(describe_holder)) {
  Holds& h = holds();
  std::lock_guard<std::mutex> lock(h.mutex);
  for (const Tensor& p : params) {
    held_.push_back(p.impl());
    h.by_tensor.emplace(p.impl(), &describe_);
  }
}

DtypeHold::~DtypeHold() {
  Holds& h = holds();
  std::lock_guard<std::mutex> lock(h.mutex);
  for (const TensorImpl* t : held_) {
    auto [first, last] = h.by_tensor.equal_range(t);
    for (auto it = first; it != last; ++it)
      if (it->second == &describe_) {
        h.by_tensor.erase(it);
        break;
      }
  }
}

std::string dtype_holder(const Tensor& t) {
  Holds& h = holds();
  std::lock_guard<std::mutex> lock(h.mutex);
  auto it = h.by_tensor.find(t.impl());
  return it == h.by_tensor.end() ? std::string() : (*it->second)();
}

}  // namespace ringgrad::nn
