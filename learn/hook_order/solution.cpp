// A solution of the hook-order exercise.
#include "learn/hook_order/hook_order.h"

namespace learn {

std::vector<std::string> record_hook_order(ringgrad::nn::Module& model, const ringgrad::Tensor& x,
                                           const ringgrad::Tensor& y) {
  std::vector<std::string> order;
  std::vector<std::pair<ringgrad::Tensor, int>> handles;
  for (auto& [name, param] : model.named_parameters()) {
    const std::string n = name;  // the hook outlives this loop's binding
    handles.emplace_back(param, param.register_post_accumulate_grad_hook(
                                    [&order, n](ringgrad::Tensor&) { order.push_back(n); }));
  }
  ringgrad::cross_entropy(model(x), y).backward();
  for (auto& [param, handle] : handles) param.remove_post_accumulate_grad_hook(handle);
  return order;
}

}  // namespace learn
