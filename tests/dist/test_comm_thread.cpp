// CommThread's ordering rules with scripted ops, no network: collectives that complete on the host run
// one at a time; ops ordered on a device stream (the nccl backend's) are launched without waiting for
// the previous one, and still finish in submission order (Note [Collectives ordered on the device],
// dist/comm_thread.cpp). The "device" here is a counter the test advances: it completes the ops
// launched on it in launch order, as a CUDA stream does.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "dist/comm_thread.h"

namespace dist = ringgrad::dist;
using namespace std::chrono_literals;

namespace {

// Ops launched on it get positions 0, 1, 2, ...; completing n finishes the first n.
struct FakeStream {
  std::atomic<int> launched{0};
  std::atomic<int> completed{0};
  std::atomic<bool> fail_next{false};  // the oldest unfinished op's poll throws
  std::atomic<int> abandoned{0};
};

class StreamOp final : public dist::PendingOp {
 public:
  explicit StreamOp(FakeStream& stream) : stream_(stream), position_(stream.launched++) {}
  bool poll() override {
    if (stream_.fail_next && stream_.completed == position_) RG_FAIL("fake", "the device reported an error");
    return stream_.completed > position_;
  }
  void abandon() override { ++stream_.abandoned; }
  bool ordered_on_device() const override { return true; }

 private:
  FakeStream& stream_;
  const int position_;
};

// Completes on the host once `done` is set.
class HostOp final : public dist::PendingOp {
 public:
  explicit HostOp(const std::atomic<bool>& done) : done_(done) {}
  bool poll() override { return done_; }

 private:
  const std::atomic<bool>& done_;
};

std::shared_ptr<dist::CommThread> make_thread() {
  return std::make_shared<dist::CommThread>("fake", 0, 1, /*timeout_seconds=*/30, /*max_poll_sleep_us=*/50,
                                            /*trace=*/false);
}

// Large enough that the submitting thread never starts it itself (Note [Small collectives start on
// the caller's thread]): the communication thread's rules are what is tested.
dist::OpInfo collective(const char* name) { return dist::OpInfo{.name = name, .bytes = size_t{1} << 20}; }

// Waits up to 10 s for `condition` (the thread runs on its own schedule); false if it never held.
bool eventually(const std::function<bool()>& condition) {
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (!condition()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(100us);
  }
  return true;
}

// Submits collectives "a", "b" and "c", each launched as a StreamOp on `stream`.
std::vector<std::shared_ptr<dist::Work>> submit_three(dist::CommThread& thread, FakeStream& stream) {
  std::vector<std::shared_ptr<dist::Work>> works;
  for (const char* name : {"a", "b", "c"})
    works.push_back(thread.submit(collective(name), [&](uint64_t) { return std::make_unique<StreamOp>(stream); }));
  return works;
}

}  // namespace

TEST_CASE("CommThread launches ops ordered on the device back to back, and finishes them in order") {
  auto thread = make_thread();
  FakeStream stream;
  const auto works = submit_three(*thread, stream);
  // All three are on the "stream" before the first has finished.
  REQUIRE(eventually([&] { return stream.launched == 3; }));
  std::this_thread::sleep_for(20ms);
  for (const auto& w : works) CHECK_FALSE(w->is_completed());
  stream.completed = 1;
  REQUIRE(eventually([&] { return works[0]->is_completed(); }));
  std::this_thread::sleep_for(20ms);
  CHECK_FALSE(works[1]->is_completed());
  stream.completed = 3;
  for (const auto& w : works) {
    w->wait();
    CHECK(w->is_success());
  }
  CHECK(works[0]->end_us() <= works[1]->end_us());
  CHECK(works[1]->end_us() <= works[2]->end_us());
  CHECK(thread->stats().ops == 3);
}

TEST_CASE("CommThread runs collectives that complete on the host one at a time") {
  auto thread = make_thread();
  std::atomic<int> started{0};
  std::atomic<bool> first_done{false}, second_done{false};
  auto w1 = thread->submit(collective("a"), [&](uint64_t) {
    ++started;
    return std::make_unique<HostOp>(first_done);
  });
  auto w2 = thread->submit(collective("b"), [&](uint64_t) {
    ++started;
    return std::make_unique<HostOp>(second_done);
  });
  REQUIRE(eventually([&] { return started == 1; }));
  std::this_thread::sleep_for(50ms);
  CHECK(started == 1);  // the second waits for the first to finish
  first_done = true;
  REQUIRE(eventually([&] { return started == 2; }));
  second_done = true;
  w1->wait();
  w2->wait();
  CHECK(w1->is_success());
  CHECK(w2->is_success());
}

TEST_CASE("CommThread: a host op behind device ops finishes after them; nothing starts behind a host op") {
  auto thread = make_thread();
  FakeStream stream;
  std::atomic<bool> barrier_done{true};  // finishes as soon as it is polled
  std::atomic<bool> barrier_started{false};
  auto on_device =
      thread->submit(collective("allreduce"), [&](uint64_t) { return std::make_unique<StreamOp>(stream); });
  auto barrier = thread->submit(collective("barrier"), [&](uint64_t) {
    barrier_started = true;
    return std::make_unique<HostOp>(barrier_done);
  });
  auto after = thread->submit(collective("allreduce"), [&](uint64_t) { return std::make_unique<StreamOp>(stream); });
  // The barrier starts behind the device op, but its Work waits for the device op's.
  REQUIRE(eventually([&] { return barrier_started.load(); }));
  std::this_thread::sleep_for(50ms);
  CHECK_FALSE(barrier->is_completed());
  CHECK(stream.launched == 1);  // nothing is launched behind the host op
  stream.completed = 1;
  barrier->wait();
  CHECK(on_device->is_completed());
  REQUIRE(eventually([&] { return stream.launched == 2; }));
  stream.completed = 2;
  after->wait();
  CHECK(after->is_success());
}

TEST_CASE("CommThread: when the oldest op ordered on the device fails, the ops behind it fail too") {
  auto thread = make_thread();
  FakeStream stream;
  const auto works = submit_three(*thread, stream);
  REQUIRE(eventually([&] { return stream.launched == 3; }));
  stream.fail_next = true;
  for (const auto& w : works) CHECK_THROWS(w->wait());
  auto message = [](const std::shared_ptr<dist::Work>& w) {
    try {
      std::rethrow_exception(w->error());
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
  };
  CHECK(message(works[0]).find("the device reported an error") != std::string::npos);
  for (int i = 1; i < 3; ++i) {
    const std::string m = message(works[i]);
    CHECK_MESSAGE(m.find("a #0 failed") != std::string::npos, m);
    CHECK_MESSAGE(m.find("in flight behind it") != std::string::npos, m);
  }
  CHECK(stream.abandoned == 3);
  // The group is broken: a later op fails at once, naming the cause.
  auto later = thread->submit(collective("d"), [&](uint64_t) { return std::make_unique<StreamOp>(stream); });
  CHECK_THROWS(later->wait());
  CHECK(message(later).find("a #0 failed") != std::string::npos);
}
