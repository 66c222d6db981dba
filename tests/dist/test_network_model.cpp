// The per-message network model (dist/algorithms/network_model.h), run by CTest with
// RINGGRAD_NETWORK_MODEL set: its parser, and what a group built under it does -- the sums stay
// exact, shared memory is off, and no AllReduce finishes sooner than the messages its algorithm
// sends could cross the modelled links (a lower bound the sleeps guarantee, not a timing
// assertion; how close the times come to the cost model is docs/learn/08-cost-model.md's table).
#include <chrono>
#include <cmath>

#include "dist/algorithms/network_model.h"
#include "dist/init.h"
#include "dist/process_group.h"
#include "dist_test_util.h"

namespace detail = ringgrad::dist::detail;

TEST_CASE("network model: parses RANKS_PER_NODE,INTRA_GBPS,INTRA_US,INTER_GBPS,INTER_US and refuses the rest") {
  const detail::NetworkModel m = detail::parse_network_model("2,10,5,0.5,50", "TEST");
  CHECK(m.ranks_per_node == 2);
  CHECK(m.intra.gbps == 10);
  CHECK(m.intra.latency_us == 5);
  CHECK(m.inter.gbps == 0.5);
  CHECK(m.inter.latency_us == 50);
  CHECK(m.inter.seconds(1000000) == doctest::Approx(50e-6 + 2e-3));
  for (const char* bad :
       {"", "2,10,5,1", "2,10,5,1,50,7", "x,10,5,1,50", "2,0,5,1,50", "1.5,10,5,1,50", "2,10,-1,1,50"})
    CHECK_THROWS_WITH_AS(detail::parse_network_model(bad, "TEST"), doctest::Contains("TEST"), rg::Error);
}

TEST_CASE("network model: an AllReduce under it is exact and takes at least its messages' price") {
  const auto& model = detail::network_model();
  REQUIRE_MESSAGE(model.has_value(), "run with RINGGRAD_NETWORK_MODEL set (CTest does)");
  const int N = dist::world().size, r = dist::world().rank;
  REQUIRE(N == 2);
  REQUIRE(model->ranks_per_node == 1);  // the two ranks are two nodes: every message is inter-node
  constexpr int64_t kCount = 1 << 18;   // 1 MiB of f32
  const double S = kCount * 4.0;
  for (const char* backend : {"ring", "tree"}) {
    CAPTURE(backend);
    auto group = dist::new_group(backend, test_options());
    CHECK_FALSE(group->reduces_in_place(group->new_reduction_buffer(kCount, rg::DType::f32)));
    rg::Tensor t = rg::full({kCount}, r + 1.0);
    const auto start = std::chrono::steady_clock::now();
    group->allreduce(t, dist::ReduceOp::sum)->wait();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    CHECK(t.sum().item() == 3.0 * kCount);  // every element 1 + 2, exactly
    CHECK((t - 3.0).abs().sum().item() == 0.0);
    // ring at N = 2: two steps, each one message of S/2 (one segment); tree: one exchange of S.
    const double price = std::string(backend) == "ring" ? 2 * model->inter.seconds(static_cast<size_t>(S / 2))
                                                        : model->inter.seconds(static_cast<size_t>(S));
    CHECK(seconds >= price);
  }
}
