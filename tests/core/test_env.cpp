// core/env.h: every variable is optional, typed, and a malformed value is an error naming it.
#include <doctest/doctest.h>

#include <cstdlib>
#include <string>

#include "core/env.h"
#include "core/error.h"

using namespace ringgrad;

namespace {

// Sets one variable for the scope of a test and restores "unset" after it.
struct ScopedEnv {
  const char* name;
  ScopedEnv(const char* n, const char* value) : name(n) { ::setenv(name, value, 1); }
  ~ScopedEnv() { ::unsetenv(name); }
};

constexpr const char* kVar = "RINGGRAD_TEST_ENV_VARIABLE";

// The error's text, or "" when f did not throw.
template <class F>
std::string error_of(F f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("env: unset and empty are 'not given' for every type") {
  ::unsetenv(kVar);
  CHECK_FALSE(env::text(kVar).has_value());
  CHECK_FALSE(env::integer(kVar, "op", 0, 10).has_value());
  ScopedEnv empty(kVar, "");
  CHECK_FALSE(env::text(kVar).has_value());
  CHECK_FALSE(env::integer(kVar, "op", 0, 10).has_value());
  CHECK_FALSE(env::number_above(kVar, "op", 0).has_value());
  CHECK_FALSE(env::flag(kVar, "op").has_value());
  CHECK_FALSE(env::bytes(kVar, "op").has_value());
  CHECK_FALSE(env::choice(kVar, "op", {"a", "b"}).has_value());
}

TEST_CASE("env::integer takes decimal integers in range and names the variable otherwise") {
  {
    ScopedEnv v(kVar, "42");
    CHECK(env::integer(kVar, "threads", 1, 1024) == 42);
  }
  for (const char* bad : {"0", "1025", "4x", "x", "3.5", "99999999999999999999999"}) {
    ScopedEnv v(kVar, bad);
    const std::string msg = error_of([] { env::integer(kVar, "threads", 1, 1024); });
    CAPTURE(bad);
    CHECK(msg.find("[threads]") != std::string::npos);
    CHECK(msg.find(kVar) != std::string::npos);
    CHECK(msg.find(std::string("'") + bad + "'") != std::string::npos);
    CHECK(msg.find("[1, 1024]") != std::string::npos);
  }
}

TEST_CASE("env::number_above, flag, bytes and choice parse what they document") {
  {
    ScopedEnv v(kVar, "2.5");
    CHECK(env::number_above(kVar, "dist", 0) == doctest::Approx(2.5));
  }
  for (const char* bad : {"0", "-1", "abc", "inf", "1s"}) {
    ScopedEnv v(kVar, bad);
    CAPTURE(bad);
    CHECK(error_of([] { env::number_above(kVar, "dist", 0); }).find("greater than 0") != std::string::npos);
  }
  for (const char* on : {"1", "true", "on"}) {
    ScopedEnv v(kVar, on);
    CHECK(env::flag(kVar, "dist") == true);
  }
  for (const char* off : {"0", "false", "off"}) {
    ScopedEnv v(kVar, off);
    CHECK(env::flag(kVar, "dist") == false);
  }
  {
    ScopedEnv v(kVar, "yes");
    CHECK(error_of([] { env::flag(kVar, "dist"); }).find("0/1/true/false/on/off") != std::string::npos);
  }
  const std::pair<const char*, int64_t> sizes[] = {{"65536", 65536}, {"64K", 65536}, {"1M", 1 << 20}, {"1.5K", 1536}};
  for (const auto& [text, value] : sizes) {
    ScopedEnv v(kVar, text);
    CHECK(env::bytes(kVar, "dist") == value);
  }
  for (const char* bad : {"-1", "64k", "1G", "K"}) {
    ScopedEnv v(kVar, bad);
    CAPTURE(bad);
    CHECK(error_of([] { env::bytes(kVar, "dist"); }).find("is not a byte count") != std::string::npos);
  }
  {
    ScopedEnv v(kVar, "openblas");
    CHECK(env::choice(kVar, "gemm", {"auto", "openblas"}) == "openblas");
  }
  {
    ScopedEnv v(kVar, "OpenBLAS");
    CHECK(error_of([] {
            env::choice(kVar, "gemm", {"auto", "openblas"});
          }).find("is not one of: auto, openblas") != std::string::npos);
  }
}
