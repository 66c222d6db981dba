// Helpers for the multi-rank tests: closed-form fills and an element-by-element comparison that
// reports the first mismatch with the rank, instead of a million CHECKs.
#pragma once

#include <doctest/doctest.h>

#include <functional>
#include <string>
#include <vector>

#include "core/env.h"
#include "core/ops.h"
#include "dist/init.h"
#include "dist/process_group.h"

namespace rg = ringgrad;
namespace dist = ringgrad::dist;

// A tensor (n) of dtype dt with element i = f(i).
inline rg::Tensor filled(int64_t n, rg::DType dt, const std::function<double(int64_t)>& f) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = f(i);
  return rg::from_vector(v, {n}, {.dtype = dt});
}

// "" when t[i] == expected(i) for every i, else the first mismatch.
inline std::string mismatch(const rg::Tensor& t, const std::function<double(int64_t)>& expected) {
  const std::vector<double> got = t.to_vector();
  for (size_t i = 0; i < got.size(); ++i) {
    const double want = expected(static_cast<int64_t>(i));
    if (got[i] != want)
      return rg::str_cat("rank ", dist::world().rank, "/", dist::world().size, ": element ", i, " of ", got.size(), " ",
                         rg::dtype_name(t.dtype()), " is ", got[i], ", expected ", want);
  }
  return "";
}

// Whether this run stages CPU tensors through host copies, as GPU tensors are (ctest's
// dist_staged_np*; Note [Host staging without a GPU] in dist/staging.h): no buffer is then shared
// memory reduced in place.
inline bool host_staging() { return rg::env::flag("RINGGRAD_DIST_HOST_STAGING", "test").value_or(false); }

// Tests use a short timeout, so that a desynchronised test fails in seconds, not minutes.
inline dist::GroupOptions test_options(double timeout_seconds = 60) {
  dist::GroupOptions o;
  o.timeout_seconds = timeout_seconds;
  return o;
}
