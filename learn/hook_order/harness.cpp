// The harness of the hook-order exercise: a 3-layer MLP, your record_hook_order(), and the check
// of the rule DDP is built on -- backward makes the last layer's gradients ready first, so a bucket
// of the last layers can be reduced while the first layers' gradients are still being computed.
#include <cstdio>

#include "dist/init.h"
#include "examples/common/command_line.h"
#include "learn/hook_order/hook_order.h"

namespace rg = ringgrad;

struct MLP : rg::nn::Module {
  std::shared_ptr<rg::nn::Linear> fc1, fc2, fc3;
  MLP() {
    fc1 = register_module("fc1", std::make_shared<rg::nn::Linear>(8, 16));
    fc2 = register_module("fc2", std::make_shared<rg::nn::Linear>(16, 16));
    fc3 = register_module("fc3", std::make_shared<rg::nn::Linear>(16, 4));
  }
  rg::Tensor forward(const rg::Tensor& x) override { return (*fc3)(rg::relu((*fc2)(rg::relu((*fc1)(x))))); }
};

int main(int argc, char** argv) {
  if (const auto code =
          ringgrad::flags::parse_no_flags(argc, argv,
                                          "The hook-order exercise: the order in which backward makes gradients ready"))
    return *code;
  rg::dist::init(&argc, &argv);
  return rg::dist::run_or_abort([] {
    rg::manual_seed(0);
    MLP model;
    rg::Generator gen(0);
    const rg::Tensor x = rg::randn({5, 8}, gen);
    const rg::Tensor y = rg::from_vector(std::vector<int64_t>{0, 1, 2, 3, 0}, {5}, {.dtype = rg::DType::i64});
    const std::vector<std::string> order = learn::record_hook_order(model, x, y);
    std::printf("gradients became ready in this order:\n");
    for (size_t i = 0; i < order.size(); ++i) std::printf("  %zu. %s\n", i + 1, order[i].c_str());

    // The check: every parameter once, and layer by layer from the last to the first.
    const std::vector<std::string> layers = {"fc3", "fc2", "fc1"};
    bool ok = order.size() == 6;
    for (size_t i = 0; ok && i < order.size(); ++i) ok = order[i].rfind(layers[i / 2] + ".", 0) == 0;
    if (!ok) {
      std::printf("FAIL: expected the 6 parameters, fc3's two first and fc1's two last\n");
      return 1;
    }
    std::printf("OK: backward runs from the loss back to the input, so fc3's gradients are ready first\n");
    return 0;
  });
}
