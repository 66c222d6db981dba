// autograd_demo: fits y = 3x - 2 + noise with a one-neuron model, printing the loss as it falls and
// the recovered parameters. Shows the whole loop a training step is made of: forward, backward,
// an in-place update under NoGradGuard, zero_grad.
#include <cstdio>

#include <ringgrad.h>

#include "examples/common/command_line.h"

using namespace ringgrad;

int main(int argc, char** argv) {
  if (const auto code = flags::parse_no_flags(
          argc, argv,
          "Fit y = 3x - 2 with one neuron: forward, backward, update, zero_grad, printed as the loss falls"))
    return *code;
  Generator gen(42);
  // Data: x: (N, 1), y = 3x - 2 + 0.1 noise
  const int64_t n = 256;
  Tensor x = uniform({n, 1}, -1.0, 1.0, gen);
  Tensor y = x * 3.0 - 2.0 + randn({n, 1}, gen) * 0.1;

  // Parameters: a (1, 1) weight and a (1) bias, as nn.Linear(1, 1) holds them.
  Tensor w = zeros({1, 1}, {.requires_grad = true});
  Tensor b = zeros({1}, {.requires_grad = true});
  const double lr = 0.1;

  std::printf("step   loss\n");
  for (int step = 0; step <= 200; ++step) {
    Tensor pred = linear(x, w, b);                   // (N, 1)
    Tensor loss = ((pred - y) * (pred - y)).mean();  // mean squared error
    loss.backward();
    {
      NoGradGuard no_grad;  // parameter updates are not part of the graph
      w.add_(w.grad(), -lr);
      b.add_(b.grad(), -lr);
    }
    w.zero_grad();
    b.zero_grad();
    if (step % 40 == 0) std::printf("%4d   %.5f\n", step, loss.item());
  }
  std::printf("learned w = %.3f (true 3), b = %.3f (true -2)\n", w.item(), b.item());
  const bool ok = std::abs(w.item() - 3.0) < 0.05 && std::abs(b.item() + 2.0) < 0.05;
  std::printf("%s\n", ok ? "demo OK" : "demo FAILED: parameters did not converge");
  return ok ? 0 : 1;
}
