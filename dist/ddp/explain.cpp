#include "dist/ddp/explain.h"

#include <cstdio>

#include "core/error.h"
#include "core/trace.h"

namespace ringgrad::dist {

namespace {
std::string ms(double us) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%+.2f ms", us * 1e-3);
  return buf;
}
}  // namespace

StepNarrator::StepNarrator(int rank, int world, int step) : rank_(rank), world_(world), step_(step) {}

void StepNarrator::say(const std::string& line) const {
  // One write per line, so that ranks narrating at once do not cut into each other's lines.
  const std::string out = str_cat("[explain rank ", rank_, "] ", line, "\n");
  std::fwrite(out.data(), 1, out.size(), stderr);
}

std::string StepNarrator::offset(double us) const { return ms(us - start_us_); }
std::string StepNarrator::at() const { return offset(trace_clock_us()); }

void StepNarrator::begin(const std::vector<std::string>& bucket_lines) {
  start_us_ = trace_clock_us();
  say(str_cat("step ", step_, ": backward began; ", bucket_lines.size(), " bucket(s), reduced across ", world_,
              " rank(s), launched in index order (Note [Buckets launch in index order], dist/ddp/reducer.h)"));
  for (size_t b = 0; b < bucket_lines.size(); ++b) say(str_cat("  bucket ", b, ": ", bucket_lines[b]));
}

void StepNarrator::gradient_ready(const std::string& name, const std::string& shape, int bucket, int64_t offset,
                                  int64_t numel, int still_to_come) {
  say(str_cat(at(), "  gradient ready: ", name, " ", shape, " -> bucket ", bucket, " [", offset, ", ", offset + numel,
              "), ", still_to_come == 0 ? "the bucket is complete" : str_cat(still_to_come, " more to come")));
}

void StepNarrator::bucket_waits(int bucket, int blocker) {
  say(str_cat(at(), "  bucket ", bucket, " complete, but waits: bucket ", blocker,
              " has not launched yet, and every rank must issue the reductions in the same order"));
}

void StepNarrator::bucket_launched(int bucket, size_t bytes, double launch_us) {
  say(str_cat(offset(launch_us), "  bucket ", bucket, " launched: its reduction (", bytes,
              " bytes) now runs on the communication thread while backward goes on"));
}

void StepNarrator::unused(const std::string& name, int bucket) {
  say(str_cat(at(), "  no gradient for ", name, " (find_unused_parameters): bucket ", bucket,
              " reduces zeros in its place"));
}

void StepNarrator::backward_computed(size_t reductions) {
  say(str_cat(at(), "  backward computed; now waiting for ", reductions,
              " reduction(s) (Reducer::finish_backward, the end-of-backward callback)"));
}

void StepNarrator::reduced(int bucket, double start_us, double end_us) {
  say(str_cat("  bucket ", bucket, " reduced on the communication thread, ", offset(start_us), " -> ", offset(end_us),
              ": its parameters' .grad hold the average over ", world_, " rank(s)"));
}

void StepNarrator::done(double exposed_ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", exposed_ms);
  say(str_cat(at(), "  step ", step_, " done: backward() returns; ", buf,
              " ms of communication were not hidden behind computation"));
}

}  // namespace ringgrad::dist
