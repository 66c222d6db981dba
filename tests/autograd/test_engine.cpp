// The backward engine against the contract in autograd/engine.h: accumulation, retain_graph, grad
// mode, detach, explicit gradients, .grad as a view into caller storage, and the ordering of
// post-accumulate-grad hooks and end-of-backward callbacks that DDP is built on.
//
// Gradients here are closed forms (d/dw sum(3w) = 3, d/dw sum(w^2) = 2w) on small f32 values, exact in
// f32, so the checks are exact.
#include <doctest/doctest.h>
#include <pthread.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "../core/test_util.h"

using namespace ringgrad;
using rgtest::make;

namespace {

Tensor leaf(const std::vector<double>& values, const Shape& shape) {
  Tensor t = make(values, shape);
  t.requires_grad_(true);
  return t;
}

}  // namespace

TEST_CASE("gradients accumulate across two backward calls") {
  Tensor w = leaf({1, 2, 3}, {3});
  CHECK_FALSE(w.grad().defined());
  (w * 3.0).sum().backward();
  CHECK_VALUES(w.grad(), Shape({3}), (std::vector<double>{3, 3, 3}), 0, 0);
  (w * 3.0).sum().backward();
  CHECK_VALUES(w.grad(), Shape({3}), (std::vector<double>{6, 6, 6}), 0, 0);

  w.zero_grad(/*set_to_none=*/false);
  CHECK_VALUES(w.grad(), Shape({3}), (std::vector<double>{0, 0, 0}), 0, 0);
  w.zero_grad();
  CHECK_FALSE(w.grad().defined());
}

TEST_CASE("accumulating a broadcast gradient twice gives the right values") {
  // sum's backward hands out an expanded (stride-0) gradient; .grad must not alias it.
  Tensor w = leaf({1, 2, 3}, {3});
  w.sum().backward();
  w.sum().backward();
  CHECK_VALUES(w.grad(), Shape({3}), (std::vector<double>{2, 2, 2}), 0, 0);
  w.expand({4, 3}).sum().backward();
  CHECK_VALUES(w.grad(), Shape({3}), (std::vector<double>{6, 6, 6}), 0, 0);
}

TEST_CASE("the gradient passed to backward is not modified by later accumulation") {
  Tensor w = leaf({1, 2, 3}, {3});
  const Tensor g = make({1, 10, 100}, {3});
  w.view({3}).backward(g);
  w.view({3}).backward(g);
  CHECK_VALUES(g, Shape({3}), (std::vector<double>{1, 10, 100}), 0, 0);
  CHECK_VALUES(w.grad(), Shape({3}), (std::vector<double>{2, 20, 200}), 0, 0);
}

TEST_CASE("a tensor used twice receives the sum of both gradients") {
  Tensor w = leaf({1, 2, 3}, {3});
  (w * w + w * 2.0).sum().backward();  // d/dw = 2w + 2
  CHECK_VALUES(w.grad(), Shape({3}), (std::vector<double>{4, 6, 8}), 0, 0);

  Tensor v = leaf({0.5, -1}, {2});
  Tensor a = v * 4.0;
  (a * a.exp().detach() + a).sum().backward();  // a used twice; d/dv = 4 (exp(a) + 1)
  CHECK_VALUES(v.grad(), Shape({2}), (std::vector<double>{4 * (std::exp(2.0) + 1), 4 * (std::exp(-4.0) + 1)}), 1e-6,
               1e-6);
}

TEST_CASE("retain_graph allows a second backward and without it the second backward throws") {
  Tensor w = leaf({1, 2, 3}, {3});
  Tensor loss = (w * w).sum();
  loss.backward(Tensor(), /*retain_graph=*/true);
  CHECK_VALUES(w.grad(), Shape({3}), (std::vector<double>{2, 4, 6}), 0, 0);
  loss.backward();  // allowed: the graph was retained; frees it now
  CHECK_VALUES(w.grad(), Shape({3}), (std::vector<double>{4, 8, 12}), 0, 0);
  CHECK_THROWS_AS(loss.backward(), ringgrad::Error);
  CHECK_VALUES(w.grad(), Shape({3}), (std::vector<double>{4, 8, 12}), 0, 0);  // unchanged by the failure

  Tensor u = leaf({1, 2}, {2});
  Tensor l2 = (u.exp() * u).sum();
  l2.backward();
  auto again = [&] { l2.backward(); };
  CHECK_ERROR(again, "retain_graph");
}

TEST_CASE("NoGradGuard stops recording and restores the previous grad mode") {
  Tensor w = leaf({1, 2}, {2});
  CHECK(autograd::grad_enabled());
  {
    NoGradGuard guard;
    CHECK_FALSE(autograd::grad_enabled());
    Tensor y = w * 2.0;
    CHECK_FALSE(y.requires_grad());
    CHECK(y.grad_fn() == nullptr);
    {
      NoGradGuard nested;
      CHECK_FALSE(autograd::grad_enabled());
    }
    CHECK_FALSE(autograd::grad_enabled());  // the nested guard restored "off", not "on"
  }
  CHECK(autograd::grad_enabled());
  Tensor z = w * 2.0;
  CHECK(z.requires_grad());
  CHECK(z.grad_fn() != nullptr);

  autograd::set_grad_enabled(false);
  CHECK_FALSE((w * 2.0).requires_grad());
  autograd::set_grad_enabled(true);
}

TEST_CASE("requires_grad propagates to results and only user-created tensors are leaves") {
  Tensor w = leaf({1, 2}, {2});
  Tensor c = make({3, 4}, {2});
  CHECK(w.is_leaf());
  CHECK(w.requires_grad());
  CHECK(w.grad_fn() == nullptr);
  CHECK_FALSE(c.requires_grad());
  CHECK_FALSE((c * 2.0).requires_grad());
  Tensor y = w * c;
  CHECK(y.requires_grad());
  CHECK_FALSE(y.is_leaf());
  CHECK(y.grad_fn() != nullptr);
  Tensor v = w.view({2, 1});  // a view of a leaf is not a leaf but requires grad
  CHECK(v.requires_grad());
  CHECK_FALSE(v.is_leaf());
}

TEST_CASE("detach shares storage and cuts the graph") {
  Tensor w = leaf({1, 2, 3}, {3});
  Tensor y = w * 2.0;
  Tensor d = y.detach();
  CHECK_FALSE(d.requires_grad());
  CHECK(d.grad_fn() == nullptr);
  CHECK(d.storage().get() == y.storage().get());
  (d * w).sum().backward();  // d is a constant: d/dw = d = 2w
  CHECK_VALUES(w.grad(), Shape({3}), (std::vector<double>{2, 4, 6}), 0, 0);
}

TEST_CASE("backward of a non-scalar takes an explicit gradient of the same shape") {
  Tensor w = leaf({1, 2, 3, 4}, {2, 2});
  Tensor y = w * 2.0;
  y.backward(make({1, 10, 100, 1000}, {2, 2}));
  CHECK_VALUES(w.grad(), Shape({2, 2}), (std::vector<double>{2, 20, 200, 2000}), 0, 0);

  // A one-element root needs no gradient, whatever its number of dims.
  Tensor v = leaf({5}, {1, 1});
  (v * 3.0).backward();
  CHECK_VALUES(v.grad(), Shape({1, 1}), (std::vector<double>{3}), 0, 0);

  // Several roots at once: the gradients of both flow into the shared leaf.
  Tensor u = leaf({1, 2}, {2});
  autograd::backward({u * 2.0, (u * u).sum()}, {make({1, 1}, {2}), Tensor()});
  CHECK_VALUES(u.grad(), Shape({2}), (std::vector<double>{4, 6}), 0, 0);  // 2 + 2u
}

TEST_CASE("retain_grad keeps the gradient of a non-leaf") {
  Tensor w = leaf({1, 2}, {2});
  Tensor y = w * 2.0;
  Tensor z = w * 3.0;
  y.retain_grad();
  (y * y + z).sum().backward();
  CHECK_VALUES(y.grad(), Shape({2}), (std::vector<double>{4, 8}), 0, 0);    // 2y
  CHECK_FALSE(z.grad().defined());                                          // not retained
  CHECK_VALUES(w.grad(), Shape({2}), (std::vector<double>{11, 19}), 0, 0);  // 8w + 3
}

TEST_CASE("set_grad to a view into a bigger buffer stays that view and accumulates in place") {
  Tensor buffer = full({10}, 1.0);  // caller-owned storage, e.g. a DDP bucket
  Tensor w = leaf({1, 2, 3, 4}, {4});
  w.set_grad(buffer.narrow(0, 3, 4));
  void* const grad_data = w.grad().raw_data();

  (w * make({1, 2, 3, 4}, {4})).sum().backward();
  CHECK(w.grad().storage().get() == buffer.storage().get());
  CHECK(w.grad().raw_data() == grad_data);
  CHECK(w.grad().offset() == 3);
  CHECK_VALUES(buffer, Shape({10}), (std::vector<double>{1, 1, 1, 2, 3, 4, 5, 1, 1, 1}), 0, 0);

  (w * w).sum().backward();  // += 2w
  CHECK(w.grad().storage().get() == buffer.storage().get());
  CHECK_VALUES(buffer, Shape({10}), (std::vector<double>{1, 1, 1, 4, 7, 10, 13, 1, 1, 1}), 0, 0);

  // A strided view works too: every other element of a (8) buffer.
  Tensor strided = zeros({8});
  Tensor u = leaf({1, 2, 3, 4}, {4});
  u.set_grad(strided.slice(0, 0, 8, 2));
  (u * 5.0).sum().backward();
  CHECK_VALUES(strided, Shape({8}), (std::vector<double>{5, 0, 5, 0, 5, 0, 5, 0}), 0, 0);
}

namespace {

// A 3-layer MLP: linear -> relu -> linear -> relu -> linear, parameters as f32 leaves.
struct Mlp {
  std::vector<std::pair<std::string, Tensor>> params;
  Tensor x;
  Mlp() {
    auto p = [&](const std::string& name, const Shape& shape, uint64_t seed) {
      Tensor t = rgtest::random_tensor(shape, seed, -0.5, 0.5);
      t.requires_grad_(true);
      params.emplace_back(name, t);
    };
    p("w1", {8, 5}, 1), p("b1", {8}, 2), p("w2", {6, 8}, 3), p("b2", {6}, 4), p("w3", {3, 6}, 5), p("b3", {3}, 6);
    x = rgtest::random_tensor({4, 5}, 7, -1, 1);
  }
  const Tensor& operator[](const std::string& name) const {
    for (const auto& [n, t] : params)
      if (n == name) return t;
    throw std::runtime_error("no parameter " + name);
  }
  Tensor loss() const {
    const Mlp& m = *this;
    Tensor h = relu(linear(x, m["w1"], m["b1"]));
    h = relu(linear(h, m["w2"], m["b2"]));
    Tensor out = linear(h, m["w3"], m["b3"]);
    return (out * out).mean();
  }
};

size_t position(const std::vector<std::string>& log, const std::string& entry) {
  return static_cast<size_t>(std::find(log.begin(), log.end(), entry) - log.begin());
}

}  // namespace

TEST_CASE("post-accumulate-grad hooks fire last layer first, see the final grad, and a callback runs once after them") {
  Mlp mlp;
  std::vector<std::string> log;
  std::map<std::string, Tensor> seen;  // .grad as each hook saw it
  int callbacks = 0;
  bool queued = false;
  bool grad_mode_in_hook = true, in_backward_in_hook = false;
  for (auto& [name, p] : mlp.params) {
    p.register_post_accumulate_grad_hook([&, name = name](Tensor& t) {
      log.push_back(name);
      seen[name] = t.grad().clone();
      grad_mode_in_hook = grad_mode_in_hook && autograd::grad_enabled();
      in_backward_in_hook = autograd::in_backward();
      if (!queued) {
        queued = true;
        autograd::queue_callback([&] {
          log.push_back("callback");
          ++callbacks;
        });
      }
    });
  }

  for (int round = 1; round <= 2; ++round) {
    INFO("backward number " << round);
    log.clear();
    seen.clear();
    queued = false;
    callbacks = 0;
    mlp.loss().backward();
    CHECK_FALSE(autograd::in_backward());
    REQUIRE(log.size() == 7);
    CHECK(log.back() == "callback");
    CHECK(callbacks == 1);
    const size_t w1 = position(log, "w1"), b1 = position(log, "b1"), w2 = position(log, "w2"), b2 = position(log, "b2"),
                 w3 = position(log, "w3"), b3 = position(log, "b3");
    std::string order;
    for (const auto& e : log) order += e + " ";
    INFO("hook order: " << order);
    CHECK(std::max(w3, b3) < std::min(w2, b2));  // layer 3 before layer 2
    CHECK(std::max(w2, b2) < std::min(w1, b1));  // layer 2 before layer 1
    for (const auto& [name, p] : mlp.params) {
      const std::string& parameter = name;  // INFO cannot name a structured binding (clang 14)
      INFO("parameter " << parameter);
      REQUIRE(seen.count(name) == 1);
      CHECK(equal(seen[name], p.grad()));  // the hook saw the final, accumulated .grad
      CHECK(p.grad().to_vector() != std::vector<double>(static_cast<size_t>(p.numel()), 0.0));
    }
  }
  CHECK(in_backward_in_hook);
  CHECK_FALSE(grad_mode_in_hook);  // nodes and hooks run with grad mode off
}

TEST_CASE("a leaf used twice gets one hook call that sees the summed gradient") {
  Tensor w = leaf({1, 2, 3}, {3});
  int calls = 0;
  Tensor seen;
  w.register_post_accumulate_grad_hook([&](Tensor& t) {
    ++calls;
    seen = t.grad().clone();
  });
  (w * 2.0 + w.exp().detach() * w + w.view({3, 1}).sum({1})).sum().backward();
  CHECK(calls == 1);
  const std::vector<double> expected = {3 + std::exp(1.0), 3 + std::exp(2.0), 3 + std::exp(3.0)};
  CHECK_VALUES(seen, Shape({3}), expected, 1e-5, 1e-6);
  CHECK(equal(seen, w.grad()));
}

TEST_CASE("hooks run in registration order, can be removed, and unreached leaves get none") {
  Tensor w = leaf({1, 2}, {2});
  Tensor unused = leaf({5}, {1});
  std::vector<std::string> log;
  const int first = w.register_post_accumulate_grad_hook([&](Tensor&) { log.push_back("first"); });
  w.register_post_accumulate_grad_hook([&](Tensor&) { log.push_back("second"); });
  unused.register_post_accumulate_grad_hook([&](Tensor&) { log.push_back("unused"); });

  (w * 2.0).sum().backward();
  CHECK(log == std::vector<std::string>{"first", "second"});

  w.remove_post_accumulate_grad_hook(first);
  log.clear();
  (w * 2.0).sum().backward();
  CHECK(log == std::vector<std::string>{"second"});
}

TEST_CASE("a hook may modify .grad in place") {
  Tensor w = leaf({1, 2}, {2});
  w.register_post_accumulate_grad_hook([](Tensor& t) { t.grad().mul_(0.5); });
  (w * 4.0).sum().backward();
  CHECK_VALUES(w.grad(), Shape({2}), (std::vector<double>{2, 2}), 0, 0);
}

TEST_CASE("queue_callback outside a backward throws") {
  CHECK_FALSE(autograd::in_backward());
  CHECK_THROWS_AS(autograd::queue_callback([] {}), ringgrad::Error);
}

TEST_CASE("callbacks run in the order queued and may queue further callbacks") {
  Tensor w = leaf({1}, {1});
  std::vector<std::string> log;
  w.register_post_accumulate_grad_hook([&](Tensor&) {
    log.push_back("hook");
    autograd::queue_callback([&] {
      log.push_back("a");
      autograd::queue_callback([&] { log.push_back("c"); });
    });
    autograd::queue_callback([&] { log.push_back("b"); });
  });
  (w * 2.0).sum().backward();
  CHECK(log == std::vector<std::string>{"hook", "a", "b", "c"});

  log.clear();
  (w * 2.0).sum().backward();  // callbacks from the previous backward do not run again
  CHECK(log == std::vector<std::string>{"hook", "a", "b", "c"});
}

TEST_CASE("an exception in a hook propagates out of backward and skips the callbacks") {
  Tensor w = leaf({1, 2}, {2});
  bool callback_ran = false;
  const int h = w.register_post_accumulate_grad_hook([&](Tensor&) {
    autograd::queue_callback([&] { callback_ran = true; });
    throw ringgrad::Error("[test] hook failed on purpose");
  });
  CHECK_THROWS_AS((w * 2.0).sum().backward(), ringgrad::Error);
  CHECK_FALSE(callback_ran);
  CHECK_FALSE(autograd::in_backward());  // the engine's state was reset

  w.remove_post_accumulate_grad_hook(h);
  w.zero_grad();
  (w * 3.0).sum().backward();  // the engine still works
  CHECK_VALUES(w.grad(), Shape({2}), (std::vector<double>{3, 3}), 0, 0);
  CHECK_FALSE(callback_ran);
}

TEST_CASE("an op whose outputs are only partly used sends zero gradient to the unused ones") {
  Tensor w = leaf({1, 2, 3, 4, 5, 6}, {6});
  const auto pieces = split(w, 2);
  (pieces[1] * 3.0).sum().backward();  // pieces 0 and 2 receive no gradient
  CHECK_VALUES(w.grad(), Shape({6}), (std::vector<double>{0, 0, 3, 3, 0, 0}), 0, 0);
}

TEST_CASE("backward frees the tensors a graph saved unless retain_graph is set") {
  // x is a 4 MiB constant; exp(x * w) is an intermediate that only the graph keeps alive (exp saves
  // its output). After backward without retain_graph the graph still exists (loss holds it) but
  // its saved tensors are gone, so at least those 4 MiB return to the allocator.
  const int64_t n = 1 << 20;
  const size_t saved_bytes = static_cast<size_t>(n) * 4;
  const Tensor x = full({n}, 0.5);
  for (bool retain : {true, false}) {
    INFO("retain_graph " << retain);
    Tensor w = leaf({1.0}, {1});
    Tensor loss = ringgrad::exp(x * w).sum();
    const size_t before = memory_stats(Device::cpu()).allocated;
    loss.backward(Tensor(), retain);
    const size_t after = memory_stats(Device::cpu()).allocated;
    if (retain) {
      CHECK(after + saved_bytes / 2 > before);  // nothing big was freed
    } else {
      CHECK(after + saved_bytes <= before + 4096);  // 4 KiB for small new allocations such as w.grad
    }
    CHECK(w.grad().item() == doctest::Approx(0.5 * std::exp(0.5) * static_cast<double>(n)).epsilon(1e-5));
  }
}

namespace {

// Runs fn on a thread with a small stack, so that recursion proportional to the graph depth overflows
// quickly instead of depending on the main thread's 8 MiB.
void run_with_small_stack(void (*fn)()) {
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, size_t{1} << 20);
  pthread_t thread;
  REQUIRE(pthread_create(
              &thread, &attr,
              [](void* f) -> void* {
                reinterpret_cast<void (*)()>(f)();
                return nullptr;
              },
              reinterpret_cast<void*>(fn)) == 0);
  pthread_join(thread, nullptr);
  pthread_attr_destroy(&attr);
}

double deep_graph_grad = 0;

void build_run_and_free_a_deep_graph() {
  Tensor w = ones({1}, {.dtype = DType::f32, .requires_grad = true});
  {
    Tensor y = w;
    for (int i = 0; i < 100000; ++i) y = y * 1.0;
    y.sum().backward();
  }  // the 100000-node graph is freed here
  {
    Tensor y = w;
    for (int i = 0; i < 100000; ++i) y = y + 0.0;
  }  // and a graph that never ran backward
  deep_graph_grad = w.grad().item();
}

}  // namespace

TEST_CASE("a graph 100000 ops deep runs backward and is freed without deep recursion") {
  // A chain of nodes owning their predecessors through shared_ptr edges is freed recursively unless
  // the engine unlinks it iteratively; at this depth that needs far more than the 1 MiB stack given here.
  run_with_small_stack(&build_run_and_free_a_deep_graph);
  CHECK(deep_graph_grad == 1.0);
}

// Note [Gradient destinations] (autograd/accumulate_grad.h): the reference is the same graph run
// without a destination; the gradients must be identical, and only their memory may differ.
namespace {

struct LinearCase {
  Tensor x, w, b, r;  // x: (5, 4), w: (3, 4), b: (3), r: (5, 3) weights the loss sum(r * y)
};

LinearCase linear_case() {
  Generator gen(11);
  LinearCase c{randn({5, 4}, gen), randn({3, 4}, gen), randn({3}, gen), randn({5, 3}, gen)};
  c.w.requires_grad_(true);
  c.b.requires_grad_(true);
  return c;
}

Tensor reference_weight_grad(const LinearCase& c, int uses) {
  Tensor w = c.w.detach().clone();
  w.requires_grad_(true);
  Tensor loss = (linear(c.x, w, c.b.detach()) * c.r).sum();
  for (int i = 1; i < uses; ++i) loss = loss + (linear(c.x, w, c.b.detach()) * c.r).sum();
  loss.backward();
  return w.grad();
}

}  // namespace

TEST_CASE("a gradient destination receives linear's weight gradient in place, with the same values") {
  LinearCase c = linear_case();
  const Tensor expected = reference_weight_grad(c, 1);
  Tensor dest = full({3, 4}, 7.0);  // stale contents: the GEMM must overwrite every element
  autograd::set_grad_destination(c.w, dest);
  for (int step = 0; step < 2; ++step) {
    CAPTURE(step);
    c.w.zero_grad();  // set_to_none: the destination is only used when .grad is empty
    (linear(c.x, c.w, c.b) * c.r).sum().backward();
    CHECK(c.w.grad().storage() == dest.storage());
    CHECK(allclose(c.w.grad(), expected, 0, 0));
    CHECK(c.b.grad().defined());  // the bias has no destination and gets its gradient as before
  }

  SUBCASE("a defined .grad is accumulated into, and the destination is left alone") {
    Tensor before = c.w.grad().clone();
    dest.fill_(7.0);
    c.w.set_grad(before.clone());
    (linear(c.x, c.w, c.b) * c.r).sum().backward();
    CHECK(c.w.grad().storage() != dest.storage());
    CHECK(allclose(c.w.grad(), before + expected, 1e-6, 1e-6));
    CHECK(allclose(dest, full({3, 4}, 7.0), 0, 0));
  }
  SUBCASE("a leaf used twice gets the sum, written into the destination at most once") {
    c.w.zero_grad();
    Tensor loss = (linear(c.x, c.w, c.b) * c.r).sum() + (linear(c.x, c.w, c.b) * c.r).sum();
    loss.backward();
    CHECK(allclose(c.w.grad(), reference_weight_grad(c, 2), 1e-6, 1e-6));
    // The two contributions were summed out of place: .grad is that sum, not the destination.
    CHECK(c.w.grad().storage() != dest.storage());
  }
  SUBCASE("removing a destination never fails, even from a leaf that no longer requires grad") {
    c.w.requires_grad_(false);
    autograd::set_grad_destination(c.w, Tensor());
    c.w.requires_grad_(true);
    c.w.zero_grad();
    (linear(c.x, c.w, c.b) * c.r).sum().backward();
    CHECK(c.w.grad().storage() != dest.storage());
  }
  SUBCASE("removing the destination restores fresh gradients") {
    autograd::set_grad_destination(c.w, Tensor());
    c.w.zero_grad();
    (linear(c.x, c.w, c.b) * c.r).sum().backward();
    CHECK(c.w.grad().storage() != dest.storage());
    CHECK(allclose(c.w.grad(), expected, 0, 0));
  }
}

TEST_CASE("set_grad_destination refuses a destination that does not match the leaf") {
  LinearCase c = linear_case();
  CHECK_THROWS_WITH(autograd::set_grad_destination(c.w, zeros({4, 3})), doctest::Contains("set_grad_destination"));
  CHECK_THROWS_WITH(autograd::set_grad_destination(c.w, zeros({3, 4}, {.dtype = DType::f64})),
                    doctest::Contains("contiguous tensor of the leaf's shape, dtype and device"));
  CHECK_THROWS_WITH(autograd::set_grad_destination(zeros({4, 3}).t(), zeros({3, 4})),
                    doctest::Contains("needs a leaf that requires grad"));
  CHECK_THROWS_WITH(autograd::set_grad_destination(c.w, zeros({4, 3}).t()), doctest::Contains("contiguous"));
}
