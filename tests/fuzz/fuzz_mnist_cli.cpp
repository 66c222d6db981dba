// Fuzz target: examples/mnist's command line (examples/mnist/config.h). A parse either fails with a
// message or yields a configuration every field of which is in its range.
#include <cmath>

#include "examples/mnist/config.h"
#include "tests/fuzz/cli_args.h"

using namespace ringgrad;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 4096) return 0;
  mnist::Config c;
  CLI::App app;
  mnist::add_flags(app, c);
  if (!fuzz::parse_flags(app, fuzz::split_args(data, size), [&] { mnist::finish(c); })) return 0;
  const auto given = [&](const char* flag) { return app.count(flag) > 0; };
  const bool in_range = c.epochs >= 1 && c.batch_size >= 1 && c.batch_size <= mnist::kMaxBatchSize && c.accum >= 1 &&
                        c.threads >= 0 && std::isfinite(c.lr) && c.lr >= 0 && std::isfinite(c.momentum) &&
                        std::isfinite(c.weight_decay) && std::isfinite(c.bucket_mb) && c.bucket_mb > 0 &&
                        c.checkpoint_every >= 0 && c.limit_steps >= 0 && c.stats_every >= 0 && !c.data.empty() &&
                        !c.device.empty() && (!given("--checkpoint") || !c.checkpoint.empty()) &&
                        (!given("--resume") || !c.resume.empty()) && (!given("--trace") || !c.trace.empty()) &&
                        (c.simulate_network.empty() || c.simulated_network.has_value());
  if (!in_range) fuzz::finding("a configuration out of range was accepted");
  return 0;
}
