// ringgrad::Error and the argument checks every op front end uses.
//
// A message names the op in brackets, the arguments with shape/dtype/device, what was expected and
// what was found, e.g.
//   [matmul] inner dimensions differ: a (32, 784) f32 cpu, b (512, 512) f32 cpu: 784 != 512
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace ringgrad {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

namespace detail {
inline void append_all(std::ostringstream&) {}
template <class T, class... Rest>
void append_all(std::ostringstream& os, const T& first, const Rest&... rest) {
  os << first;
  append_all(os, rest...);
}
}  // namespace detail

// Concatenates its arguments with operator<< into one string.
template <class... Args>
std::string str_cat(const Args&... args) {
  std::ostringstream os;
  detail::append_all(os, args...);
  return os.str();
}

// This process's place in a distributed job, "rank 1/4", set by dist::init; empty otherwise. Layers
// below dist/ that fail on their own (a CUDA call) append it, so every error names the rank.
void set_rank_label(std::string label);
const std::string& rank_label();

// Throws ringgrad::Error("[op] message...") unless cond holds.
#define RG_CHECK(cond, op, ...)                                                            \
  do {                                                                                     \
    if (!(cond)) throw ::ringgrad::Error(::ringgrad::str_cat("[", op, "] ", __VA_ARGS__)); \
  } while (0)

// Unconditional throw with the same shape.
#define RG_FAIL(op, ...) throw ::ringgrad::Error(::ringgrad::str_cat("[", op, "] ", __VA_ARGS__))

}  // namespace ringgrad
