// Bad calls throw ringgrad::Error (never crash or exit) with a message that names the op in brackets
// and describes the arguments (shape, dtype, device), as STYLE.md "Errors say what, where and how to fix"
// asks. Each check lists the parts the message must contain; the exact wording is free.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "test_util.h"

using namespace ringgrad;
using rgtest::make;
using rgtest::make_i64;

TEST_CASE("matmul with mismatched inner dimensions names both operands") {
  const Tensor a = zeros({32, 784}), b = zeros({512, 512});
  auto bad = [&] { matmul(a, b); };
  CHECK_ERROR(bad, "[matmul]", "(32, 784)", "(512, 512)", "f32", "cpu", "784", "512");
  auto bad_mm = [&] { mm(a, b); };
  CHECK_ERROR(bad_mm, "[mm]", "(32, 784)", "(512, 512)");
  auto bad_linear = [&] { linear(zeros({8, 5}), zeros({3, 4})); };
  CHECK_ERROR(bad_linear, "[linear]", "(8, 5)", "(3, 4)");
}

TEST_CASE("binary ops with different dtypes name the op and both dtypes") {
  const Tensor a = zeros({2, 3}), b = zeros({2, 3}, {.dtype = DType::f64});
  auto bad = [&] { add(a, b); };
  CHECK_ERROR(bad, "[add]", "(2, 3)", "f32", "f64");
  auto bad_op = [&] { (void)(a * b); };
  CHECK_ERROR(bad_op, "[mul]", "f32", "f64");
}

TEST_CASE("binary ops with shapes that do not broadcast name both shapes") {
  auto bad = [] { add(zeros({3, 4}), zeros({2, 3})); };
  CHECK_ERROR(bad, "[add]", "(3, 4)", "(2, 3)");
  auto bad_where = [] { where(zeros({2, 2}, {.dtype = DType::u8}), zeros({2, 2}), zeros({3, 3})); };
  CHECK_ERROR(bad_where, "[where]", "(3, 3)");
}

TEST_CASE("view with an incompatible shape or layout explains itself") {
  const Tensor x = zeros({3, 4});
  auto wrong_numel = [&] { x.view({5, 2}); };
  CHECK_ERROR(wrong_numel, "[view]", "(3, 4)", "(5, 2)");
  auto wrong_layout = [&] { x.t().view({12}); };
  CHECK_ERROR(wrong_layout, "[view]", "(4, 3)");
  auto wrong_reshape = [&] { x.reshape({7, -1}); };
  CHECK_ERROR(wrong_reshape, "(3, 4)");
}

TEST_CASE("backward of a non-scalar without a gradient says that one is needed") {
  Tensor w = ones({2, 3}, {.dtype = DType::f32, .requires_grad = true});
  Tensor y = w * 2.0;
  auto bad = [&] { y.backward(); };
  CHECK_ERROR(bad, "backward", "(2, 3)");
  auto bad_shape = [&] { y.backward(ones({3, 2})); };  // explicit gradient of the wrong shape
  CHECK_ERROR(bad_shape, "(2, 3)", "(3, 2)");
}

TEST_CASE("a second backward through a freed graph says to pass retain_graph") {
  Tensor w = full({3}, 2.0, {.dtype = DType::f32, .requires_grad = true});
  Tensor loss = (w * w).sum();
  loss.backward();
  auto again = [&] { loss.backward(); };
  CHECK_ERROR(again, "retain_graph");
}

TEST_CASE("requires_grad_ on an integer tensor is refused") {
  Tensor i = zeros({4}, {.dtype = DType::i64});
  auto bad = [&] { i.requires_grad_(true); };
  CHECK_ERROR(bad, "requires_grad", "i64");
  auto bad_factory = [] { zeros({4}, {.dtype = DType::i32, .requires_grad = true}); };
  CHECK_ERROR(bad_factory, "i32");
}

TEST_CASE("cross_entropy with a target of the wrong length names both shapes") {
  const Tensor logits = zeros({4, 3});
  auto bad = [&] { cross_entropy(logits, make_i64({0, 1, 2, 0, 1}, {5})); };
  CHECK_ERROR(bad, "[cross_entropy]", "(4, 3)", "5");
  auto bad_dtype = [&] { cross_entropy(logits, make({0, 1, 2, 0}, {4})); };  // f32 target
  CHECK_ERROR(bad_dtype, "[cross_entropy]", "f32", "i64");
  auto bad_class = [&] { cross_entropy(logits, make_i64({0, 1, 3, 0}, {4})); };  // class 3 of 3
  CHECK_ERROR(bad_class, "[cross_entropy]", "3");
}

TEST_CASE("use of an undefined tensor throws instead of crashing") {
  const Tensor undefined;
  CHECK_FALSE(undefined.defined());
  auto shape = [&] { (void)undefined.shape(); };
  CHECK_ERROR(shape, "undefined");
  auto op = [&] { add(undefined, ones({2})); };
  CHECK_ERROR(op, "undefined");
  auto method = [&] { (void)undefined.sum(); };
  CHECK_ERROR(method, "undefined");
}

TEST_CASE("indexing out of range names the op, the index and the size") {
  const Tensor x = zeros({3, 4});
  auto sel = [&] { x.select(1, 4); };
  CHECK_ERROR(sel, "[select]", "4");
  auto nar = [&] { x.narrow(0, 2, 2); };
  CHECK_ERROR(nar, "[narrow]", "(3, 4)");
  auto dim = [&] { x.sum({2}); };
  CHECK_ERROR(dim, "2");
  auto idx = [&] { index_select(x, 0, make_i64({0, 3}, {2})); };
  CHECK_ERROR(idx, "[index_select]", "3");
  auto idx_dtype = [&] { index_select(x, 0, make({0, 1}, {2})); };  // f32 indices
  CHECK_ERROR(idx_dtype, "[index_select]", "i64");
  auto cat_bad = [&] { cat({x, zeros({3, 5})}, 0); };
  CHECK_ERROR(cat_bad, "[cat]", "(3, 4)", "(3, 5)");
}

TEST_CASE("item on a tensor with more than one element and data of the wrong type are errors") {
  auto item = [] { (void)zeros({2, 2}).item(); };
  CHECK_ERROR(item, "(2, 2)");
  auto data = [] { (void)zeros({2}).data<double>(); };
  CHECK_ERROR(data, "[data]", "f64", "f32");
}

TEST_CASE("math ops refuse integer inputs where a float is needed") {
  auto e = [] { ringgrad::exp(zeros({2}, {.dtype = DType::i64})); };
  CHECK_ERROR(e, "[exp]", "i64");
  auto sm = [] { softmax(zeros({2, 2}, {.dtype = DType::i32}), 1); };
  CHECK_ERROR(sm, "[softmax]", "i32");
}

TEST_CASE("set_num_threads rejects a count below one") {
  auto bad = [] { set_num_threads(0); };
  CHECK_ERROR(bad, "[set_num_threads]", "0");
}

TEST_CASE("backward from a tensor that does not require grad is an error") {
  auto bad = [] { ones({1}).backward(); };
  CHECK_ERROR(bad, "[backward]", "(1,)", "require");
}

TEST_CASE("parse_device reads cpu / cuda / cuda:N and says what is visible when a GPU is missing") {
  CHECK(parse_device("cpu") == Device::cpu());
  auto unknown = [] { parse_device("gpu"); };
  CHECK_ERROR(unknown, "[device]", "'gpu'", "cpu, cuda or cuda:N");
  if (cuda_device_count() == 0) {  // this machine: no GPU (or no CUDA backend in this build)
    auto missing = [] { parse_device("cuda", /*local_rank=*/1); };
    CHECK_ERROR(missing, "[device]", "'cuda' asked for", cuda_compiled() ? "0 CUDA device(s)" : "no CUDA backend");
    auto numbered = [] { parse_device("cuda:3"); };
    CHECK_ERROR(numbered, "[device]", "'cuda:3'");
  } else {
    CHECK(parse_device("cuda", cuda_device_count() + 1) == Device::cuda(1 % cuda_device_count()));
  }
}

TEST_CASE("pin_memory without CUDA is a clear error, from the DataLoader's thread too") {
  if (cuda_compiled()) return;  // pinned memory itself is tested in tests/cuda
  auto pin = [] { ones({4}).pin_memory(); };
  CHECK_ERROR(pin, "[pin_memory]", "needs the CUDA backend", "(4,) f32 cpu");
  auto dataset = std::make_shared<data::TensorDataset>(zeros({6, 2}), zeros({6}, {.dtype = DType::i64}));
  auto sampler =
      std::make_shared<data::DistributedSampler>(6,
                                                 data::SamplerOptions{.num_replicas = 1, .rank = 0, .shuffle = false});
  data::DataLoader loader(dataset, sampler, {.batch_size = 2, .prefetch = 1, .pin_memory = true});
  auto iterate = [&] {
    for (const data::Example& batch : loader) (void)batch;
  };
  CHECK_ERROR(iterate, "[pin_memory]", "needs the CUDA backend");
}

TEST_CASE("shapes whose element or byte counts overflow are errors, not buffers too small") {
  // 4 x 2^31 x 2^31 = 2^64 elements: wrapped, it would be 0 and pass as an empty tensor.
  CHECK_THROWS_WITH_AS(empty({4, int64_t{1} << 31, int64_t{1} << 31}),
                       doctest::Contains("(4, 2147483648, 2147483648) overflows 64 bits"), Error);
  // 2^62 f32 elements = 2^64 bytes: the byte count wraps to 0.
  CHECK_THROWS_WITH_AS(empty({int64_t{1} << 62}, {.dtype = DType::f32}), doctest::Contains("more than 2^64 bytes"),
                       Error);
  // 2^63 bytes: no size class exists (the class search would double past 2^63 and never end).
  CHECK_THROWS_WITH_AS(empty({int64_t{1} << 61}, {.dtype = DType::f32}), doctest::Contains("exceeds 2^62 bytes"),
                       Error);
  // An empty blob may come with a null pointer.
  CHECK(from_blob(nullptr, {0, 3}, DType::f32).numel() == 0);
}
