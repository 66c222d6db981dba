// Fuzz target: examples/gpt_mini's command line (examples/gpt_mini/config.h). A parse either fails
// with a message or yields a configuration every field of which is in its range.
#include <cmath>

#include "examples/gpt_mini/config.h"
#include "tests/fuzz/cli_args.h"

using namespace ringgrad;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 4096) return 0;
  gpt_mini::Config c;
  CLI::App app;
  gpt_mini::add_flags(app, c);
  if (!fuzz::parse_flags(app, fuzz::split_args(data, size), [&] { gpt_mini::finish(c); })) return 0;
  const auto finite_at_least = [](double v, double lo) { return std::isfinite(v) && v >= lo; };
  const bool in_range =
      c.max_steps >= 1 && c.lr_decay_steps >= 1 && c.warmup >= 0 && c.batch_size >= 1 && c.block_size >= 1 &&
      c.batch_size * c.block_size <= gpt_mini::kMaxTokensPerMicroBatch && c.n_layer >= 1 && c.n_head >= 1 &&
      c.n_embd % c.n_head == 0 && c.accum >= 1 && c.eval_every >= 0 && c.eval_batches >= 1 && c.log_every >= 1 &&
      c.checkpoint_every >= 0 && c.num_chars >= 0 && c.top_k >= 0 && c.threads >= 0 && finite_at_least(c.lr, 0) &&
      finite_at_least(c.min_lr, 0) && c.min_lr <= c.lr && finite_at_least(c.weight_decay, 0) &&
      finite_at_least(c.clip, 0) && c.clip > 0 && finite_at_least(c.temperature, 0) && c.temperature > 0 &&
      finite_at_least(c.bucket_mb, 0) && c.bucket_mb > 0 && !c.prompt.empty() && !c.data.empty() &&
      (app.count("--checkpoint") == 0 || !c.checkpoint.empty()) && (app.count("--resume") == 0 || !c.resume.empty());
  if (!in_range) fuzz::finding("a configuration out of range was accepted");
  return 0;
}
