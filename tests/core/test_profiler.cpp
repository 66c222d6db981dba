// The per-op profiler (core/profiler.h): calls, FLOPs and bytes against the ops' shapes worked out by
// hand, self time against total minus the ops inside, the phases kept apart, the trace events nested
// as the scopes were, and nothing recorded while it is off or paused.
#include <doctest/doctest.h>

#include <chrono>
#include <optional>
#include <stdexcept>
#include <thread>

#include "core/native/native.h"
#include "ringgrad.h"

using namespace ringgrad;

namespace {

// The row of `name` in `phase`, if the table has one.
std::optional<profiler::OpStats> row_of(const std::string& name, profiler::Phase phase) {
  for (const profiler::OpStats& row : profiler::op_table())
    if (row.name == name && row.phase == phase) return row;
  return std::nullopt;
}

void busy_wait_us(double us) {
  const double until = trace_clock_us() + us;
  while (trace_clock_us() < until) {}
}

// Leaves the profiler off and empty for the next test, whatever this one did.
struct CleanProfiler {
  CleanProfiler() { profiler::reset(); }
  ~CleanProfiler() {
    profiler::disable();
    profiler::reset();
  }
};

}  // namespace

TEST_CASE("profiler: off, ops record nothing") {
  CleanProfiler clean;
  Generator gen(1);
  const Tensor a = randn({8, 4}, gen), b = randn({4, 3}, gen);
  (void)native::mm(a, b);
  (void)native::unary(UnaryOp::relu, a);
  CHECK(profiler::op_table().empty());
  CHECK(profiler::trace_events().empty());
  CHECK(profiler::recorded_wall_us() == 0);
}

TEST_CASE("profiler: calls, FLOPs and bytes of forward ops") {
  CleanProfiler clean;
  Generator gen(1);
  const Tensor a = randn({8, 4}, gen), b = randn({4, 3}, gen), c = randn({5, 6}, gen);
  profiler::enable();
  for (int i = 0; i < 3; ++i) (void)native::mm(a, b);
  for (int i = 0; i < 2; ++i) (void)native::unary(UnaryOp::relu, c);
  (void)native::binary(BinaryOp::add, c, c);
  profiler::disable();

  const auto mm = row_of("mm", profiler::Phase::forward);
  REQUIRE(mm);
  CHECK(mm->calls == 3);
  CHECK(mm->flops == 3 * 2.0 * 8 * 4 * 3);  // 2 M K N per product
  CHECK(mm->bytes == 0);
  const auto relu = row_of("relu", profiler::Phase::forward);
  REQUIRE(relu);
  CHECK(relu->calls == 2);
  CHECK(relu->bytes == 2 * (30 * 4 + 30 * 4));  // reads 30 f32, writes 30 f32, per call
  CHECK(relu->flops == 0);
  const auto add = row_of("add", profiler::Phase::forward);
  REQUIRE(add);
  CHECK(add->bytes == 3 * 30 * 4);  // two inputs, one output
  for (const profiler::OpStats& row : profiler::op_table()) {
    CHECK(row.total_us >= 0);
    CHECK(row.self_us <= row.total_us + 1e-9);
  }
}

TEST_CASE("profiler: self time is the total minus the recorded ops inside") {
  CleanProfiler clean;
  Generator gen(1);
  const Tensor a = randn({64, 64}, gen);
  profiler::enable();
  {
    profiler::OpScope outer("outer");
    (void)native::mm(a, a);
    (void)native::mm(a, a);
    busy_wait_us(2000);  // the outer op's own work
  }
  profiler::disable();
  const auto outer = row_of("outer", profiler::Phase::forward), mm = row_of("mm", profiler::Phase::forward);
  REQUIRE(outer);
  REQUIRE(mm);
  CHECK(mm->calls == 2);
  CHECK(outer->self_us == doctest::Approx(outer->total_us - mm->total_us).epsilon(1e-9));
  CHECK(outer->self_us >= 2000);
  CHECK(mm->self_us == doctest::Approx(mm->total_us));  // a leaf: nothing recorded inside
  // The table's order: largest self time first.
  const auto table = profiler::op_table();
  REQUIRE(table.size() == 2);
  CHECK(table[0].self_us >= table[1].self_us);
}

TEST_CASE("profiler: backward and optimizer ops are rows of their own") {
  CleanProfiler clean;
  Generator gen(1);
  Tensor x = randn({4, 3}, gen).requires_grad_(), w = randn({3, 2}, gen).requires_grad_();
  optim::SGD sgd(std::vector<Tensor>{x, w}, {.lr = 0.1});
  profiler::enable();
  Tensor loss = sum(matmul(x, w));
  loss.backward();
  sgd.step();
  profiler::disable();

  double forward_flops = 0, backward_flops = 0;
  bool node_row = false;
  for (const profiler::OpStats& row : profiler::op_table()) {
    if (row.phase == profiler::Phase::forward) forward_flops += row.flops;
    if (row.phase == profiler::Phase::backward) {
      backward_flops += row.flops;
      node_row |= row.name == "node:mm";
    }
  }
  // x @ w: 2 * 4 * 3 * 2 FLOPs; its backward has two products of the same size (dx, dw).
  CHECK(forward_flops == 48);
  CHECK(backward_flops == 96);
  CHECK(node_row);  // the engine records each node around its formula's ops, under a name of its own
  const auto backward_mm = row_of("mm", profiler::Phase::backward);
  REQUIRE(backward_mm);
  CHECK(backward_mm->calls == 2);  // the node's formula: g w^T and x^T g
  const auto step = row_of("SGD.step", profiler::Phase::optimizer);
  REQUIRE(step);
  CHECK(step->calls == 1);
}

TEST_CASE("profiler: each thread records its own ops, in its own phase") {
  CleanProfiler clean;
  Generator gen(1);
  const Tensor a = randn({16, 16}, gen);
  profiler::enable();
  std::thread comm([&] {
    profiler::PhaseGuard phase(profiler::Phase::comm);
    profiler::OpScope outer("comm work");
    (void)native::mm(a, a);
  });
  {
    profiler::OpScope outer("main work");
    (void)native::mm(a, a);
    (void)native::mm(a, a);
  }
  comm.join();
  profiler::disable();
  const auto comm_mm = row_of("mm", profiler::Phase::comm), main_mm = row_of("mm", profiler::Phase::forward);
  REQUIRE(comm_mm);
  REQUIRE(main_mm);
  CHECK(comm_mm->calls == 1);
  CHECK(main_mm->calls == 2);
  // Each thread's outer op subtracts its own thread's children only.
  CHECK(row_of("comm work", profiler::Phase::comm)->self_us ==
        doctest::Approx(row_of("comm work", profiler::Phase::comm)->total_us - comm_mm->total_us).epsilon(1e-9));
  CHECK(row_of("main work", profiler::Phase::forward)->self_us ==
        doctest::Approx(row_of("main work", profiler::Phase::forward)->total_us - main_mm->total_us).epsilon(1e-9));
}

TEST_CASE("profiler: a DataLoader's prefetching worker records in phase data, on its own trace row") {
  CleanProfiler clean;
  auto ds =
      std::make_shared<data::TensorDataset>(arange(0, 40).reshape({20, 2}), arange(0, 20, 1, {.dtype = DType::i64}));
  auto sampler = std::make_shared<data::DistributedSampler>(20, data::SamplerOptions{.num_replicas = 1, .rank = 0});
  profiler::enable({.trace_events = true});
  {
    data::DataLoader loader(ds, sampler, {.batch_size = 5, .prefetch = 2});
    int64_t batches = 0;
    for (const data::Example& batch : loader) batches += batch.input.size(0) > 0;
    CHECK(batches == 4);
  }
  profiler::disable();
  const auto gathered = row_of("index_select", profiler::Phase::data);  // collate: inputs and targets
  REQUIRE(gathered);
  CHECK(gathered->calls == 8);
  CHECK_FALSE(row_of("index_select", profiler::Phase::forward));
  for (const TraceEvent& e : profiler::trace_events()) {
    if (e.category != "op:data") continue;
    CHECK(e.thread.rfind("data ops ", 0) == 0);
  }
}

TEST_CASE("profiler: an op that throws is not counted") {
  CleanProfiler clean;
  profiler::enable();
  try {
    profiler::OpScope op("throws");
    throw std::runtime_error("refused");
  } catch (const std::runtime_error&) {}
  { profiler::OpScope op("returns"); }
  profiler::disable();
  CHECK_FALSE(row_of("throws", profiler::Phase::forward));
  CHECK(row_of("returns", profiler::Phase::forward));
}

TEST_CASE("profiler: trace events nest as the scopes did") {
  CleanProfiler clean;
  Generator gen(1);
  const Tensor a = randn({32, 32}, gen);
  profiler::enable({.trace_events = true});
  {
    profiler::OpScope outer("outer");
    (void)native::mm(a, a);
  }
  profiler::disable();
  const std::vector<TraceEvent> events = profiler::trace_events();
  REQUIRE(events.size() == 2);
  const TraceEvent& mm = events[0];  // recorded at its end, before the outer op's
  const TraceEvent& outer = events[1];
  CHECK(mm.name == "mm");
  CHECK(outer.name == "outer");
  CHECK(mm.category == "op:forward");
  CHECK(mm.thread == "compute");
  CHECK(mm.args_json == "\"flops\": 65536");  // 2 * 32^3
  CHECK(mm.start_us >= outer.start_us);
  CHECK(mm.start_us + mm.duration_us <= outer.start_us + outer.duration_us);
  // Without Options::trace_events only the table is kept.
  profiler::reset();
  profiler::enable();
  (void)native::mm(a, a);
  profiler::disable();
  CHECK(profiler::trace_events().empty());
  CHECK(profiler::op_table().size() == 1);
}

TEST_CASE("profiler: a pause records neither ops nor wall time") {
  CleanProfiler clean;
  Generator gen(1);
  const Tensor a = randn({8, 8}, gen);
  profiler::enable({.trace_events = true});
  {
    profiler::PauseGuard evaluation;
    CHECK_FALSE(profiler::enabled());
    (void)native::mm(a, a);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  CHECK(profiler::enabled());
  (void)native::mm(a, a);
  profiler::disable();
  CHECK(row_of("mm", profiler::Phase::forward)->calls == 1);
  CHECK(profiler::trace_events().size() == 1);  // the options came back with the recording
  CHECK(profiler::recorded_wall_us() < 50'000);
  // A pause while off leaves it off.
  { profiler::PauseGuard nothing; }
  CHECK_FALSE(profiler::enabled());
}

TEST_CASE("profiler: the table shows each row, its share and the rates") {
  CleanProfiler clean;
  Generator gen(1);
  const Tensor a = randn({64, 64}, gen);
  profiler::enable();
  for (int i = 0; i < 4; ++i) (void)native::mm(a, a);
  (void)native::unary(UnaryOp::exp, a);
  profiler::disable();
  const std::string table = profiler::format_table(profiler::op_table(), /*steps=*/2);
  CHECK(table.find("phase") == 0);
  CHECK(table.find("self/step") != std::string::npos);
  CHECK(table.find("forward   mm ") != std::string::npos);
  CHECK(table.find("forward   exp ") != std::string::npos);
  CHECK(table.find("over 2 steps") != std::string::npos);
  // Only the first row, and a line for the rest.
  const std::string one = profiler::format_table(profiler::op_table(), 0, /*max_rows=*/1);
  CHECK(one.find("1 more ops") != std::string::npos);
}
