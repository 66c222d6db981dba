// The harness of the set_epoch exercise. Checks your my_shard against data::DistributedSampler for
// several world sizes, ranks and epochs, then shows what set_epoch changes: the permutation is
// seeded with seed + epoch, so a sampler whose epoch never changes deals the same shards every
// epoch -- each rank sees the same examples in the same order, epoch after epoch.
#include <cstdio>
#include <set>
#include <string>

#include "data/sampler.h"
#include "dist/init.h"
#include "examples/common/command_line.h"
#include "learn/set_epoch/set_epoch.h"

namespace rg = ringgrad;

namespace {

std::string str(const std::vector<int64_t>& v) {
  std::string s;
  for (int64_t i : v) s += (s.empty() ? "" : " ") + std::to_string(i);
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  if (const auto code = ringgrad::flags::parse_no_flags(
          argc, argv, "The set_epoch exercise: your shard against data::DistributedSampler, epoch by epoch"))
    return *code;
  rg::dist::init(&argc, &argv);
  return rg::dist::run_or_abort([] {
    constexpr int64_t kSize = 10;  // not a multiple of 3 or 4: padding is needed there
    constexpr uint64_t kSeed = 42;
    bool ok = true;
    for (int64_t N : {1, 2, 3, 4})
      for (int64_t epoch = 0; epoch < 3; ++epoch) {
        std::set<int64_t> seen;
        for (int64_t rank = 0; rank < N; ++rank) {
          rg::data::DistributedSampler sampler(kSize, {.num_replicas = N, .rank = rank, .seed = kSeed});
          sampler.set_epoch(epoch);
          const std::vector<int64_t> want = sampler.indices();
          const std::vector<int64_t> got = learn::my_shard(rg::data::seeded_permutation(kSize, kSeed + epoch), N, rank);
          if (got != want) {
            std::printf("FAIL: N = %lld, rank %lld, epoch %lld: my_shard gives [%s], the sampler [%s]\n",
                        static_cast<long long>(N), static_cast<long long>(rank), static_cast<long long>(epoch),
                        str(got).c_str(), str(want).c_str());
            ok = false;
          }
          seen.insert(got.begin(), got.end());
        }
        if (ok && static_cast<int64_t>(seen.size()) != kSize) {
          std::printf("FAIL: N = %lld, epoch %lld: the shards together miss examples\n", static_cast<long long>(N),
                      static_cast<long long>(epoch));
          ok = false;
        }
      }
    if (!ok) return 1;

    std::printf("rank 0 of 2, dataset of %lld examples, seed %llu:\n", static_cast<long long>(kSize),
                static_cast<unsigned long long>(kSeed));
    for (bool call_set_epoch : {false, true}) {
      rg::data::DistributedSampler sampler(kSize, {.num_replicas = 2, .rank = 0, .seed = kSeed});
      std::set<std::vector<int64_t>> distinct;
      for (int64_t epoch = 0; epoch < 3; ++epoch) {
        if (call_set_epoch) sampler.set_epoch(epoch);
        const std::vector<int64_t> shard =
            learn::my_shard(rg::data::seeded_permutation(kSize, kSeed + static_cast<uint64_t>(sampler.epoch())), 2, 0);
        distinct.insert(shard);
        std::printf("  %s epoch %lld: [%s]\n", call_set_epoch ? "with set_epoch,   " : "without set_epoch,",
                    static_cast<long long>(epoch), str(shard).c_str());
      }
      if (call_set_epoch != (distinct.size() > 1)) {
        std::printf("FAIL: %s\n", call_set_epoch ? "set_epoch should reshuffle" : "the epoch never changed");
        return 1;
      }
    }
    std::printf("OK: your shards are the sampler's; without set_epoch every epoch repeats the first one's\n");
    return 0;
  });
}
