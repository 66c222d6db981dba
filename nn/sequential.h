// nn::Sequential: children named "0", "1", ... applied in order.
#pragma once

#include <initializer_list>

#include "nn/module.h"

namespace ringgrad::nn {

class Sequential : public Module {
 public:
  Sequential() : Module("Sequential") {}
  Sequential(std::initializer_list<std::shared_ptr<Module>> modules) : Module("Sequential") {
    for (const auto& m : modules) push_back(m);
  }
  void push_back(std::shared_ptr<Module> module) {
    add_child(std::to_string(layers_.size()), module);
    layers_.push_back(std::move(module));
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = x;
    for (auto& layer : layers_) h = layer->forward(h);
    return h;
  }
  size_t size() const { return layers_.size(); }
  const std::shared_ptr<Module>& operator[](size_t i) const { return layers_.at(i); }

 private:
  std::vector<std::shared_ptr<Module>> layers_;
};

}  // namespace ringgrad::nn
