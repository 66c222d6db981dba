// Validators for the examples' command-line flags (CLI11), so that every flag says which flag is
// wrong and why: numbers that are finite and in range, text that is not empty.
//
//   app.add_option("--lr", c.lr)->check(flags::finite_in(0, 1e3));
//   app.add_option("--checkpoint", c.checkpoint)->check(flags::non_empty);
//
// CLI11's own CLI::Range accepts NaN (every comparison with NaN is false), hence finite_in.
#pragma once

#include <CLI/CLI.hpp>
#include <cmath>
#include <string>
#include <thread>

#include "core/parallel.h"

namespace ringgrad::flags {

// A finite number in [lo, hi] (or (lo, hi] with open_below).
inline CLI::Validator finite_in(double lo, double hi, bool open_below = false) {
  const std::string range =
      (open_below ? "(" : "[") + CLI::detail::to_string(lo) + ", " + CLI::detail::to_string(hi) + "]";
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        double v = 0;
        if (!CLI::detail::lexical_cast(text, v)) return "'" + text + "' is not a number";
        if (!std::isfinite(v)) return "must be a finite number in " + range + ", got " + text;
        if (v < lo || v > hi || (open_below && v == lo)) return "must be in " + range + ", got " + text;
        return {};
      },
      "FINITE in " + range);
}

// An integer in [lo, hi]; CLI11 has already refused what does not fit the option's type.
inline CLI::Validator int_in(long long lo, long long hi) {
  const std::string range = "[" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        long long v = 0;
        if (!CLI::detail::lexical_cast(text, v)) return "'" + text + "' is not an integer";
        if (v < lo || v > hi) return "must be in " + range + ", got " + text;
        return {};
      },
      "INT in " + range);
}

inline const CLI::Validator non_empty(
    [](std::string& text) -> std::string { return text.empty() ? "must not be empty" : std::string(); }, "NONEMPTY");

// The most compute threads set_num_threads accepts on this machine.
inline long long max_threads() {
  const long long cores = std::max(1u, std::thread::hardware_concurrency());
  return cores * kMaxThreadsPerCore;
}

// Compute threads: at least 1, at most max_threads().
inline CLI::Validator thread_count() { return int_in(1, max_threads()); }

}  // namespace ringgrad::flags
