#include "core/env.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "core/error.h"

namespace ringgrad::env {

std::optional<std::string> text(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

std::optional<int64_t> integer(const char* name, const char* op, int64_t min, int64_t max) {
  const auto v = text(name);
  if (!v) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const long long n = std::strtoll(v->c_str(), &end, 10);
  RG_CHECK(end != v->c_str() && *end == '\0' && errno == 0 && n >= min && n <= max, op, name, "='", *v,
           "' is not an integer in [", min, ", ", max, "]");
  return static_cast<int64_t>(n);
}

std::optional<double> number_above(const char* name, const char* op, double above) {
  const auto v = text(name);
  if (!v) return std::nullopt;
  char* end = nullptr;
  const double x = std::strtod(v->c_str(), &end);
  RG_CHECK(end != v->c_str() && *end == '\0' && std::isfinite(x) && x > above, op, name, "='", *v,
           "' is not a number greater than ", above);
  return x;
}

std::optional<bool> flag(const char* name, const char* op) {
  const auto v = text(name);
  if (!v) return std::nullopt;
  if (*v == "0" || *v == "false" || *v == "off") return false;
  RG_CHECK(*v == "1" || *v == "true" || *v == "on", op, name, "='", *v, "' is not 0/1/true/false/on/off");
  return true;
}

std::optional<int64_t> bytes(const char* name, const char* op) {
  const auto v = text(name);
  if (!v) return std::nullopt;
  char* end = nullptr;
  const double value = std::strtod(v->c_str(), &end);
  const std::string unit = end;
  const double scale = unit.empty() ? 1 : unit == "K" ? 1 << 10 : unit == "M" ? 1 << 20 : -1;
  RG_CHECK(end != v->c_str() && std::isfinite(value) && value >= 0 && scale > 0 && value * scale < 0x1p62, op, name,
           "='", *v, "' is not a byte count (e.g. 65536, 64K, 1M)");
  return static_cast<int64_t>(value * scale);
}

std::optional<std::string> choice(const char* name, const char* op, std::initializer_list<const char*> choices) {
  const auto v = text(name);
  if (!v) return std::nullopt;
  std::string listed;
  for (const char* c : choices) {
    if (*v == c) return v;
    listed += listed.empty() ? c : str_cat(", ", c);
  }
  RG_FAIL(op, name, "='", *v, "' is not one of: ", listed);
}

}  // namespace ringgrad::env
