// Environment variables: the one place the library reads them, typed and validated.
//
// Every variable is optional: unset or empty means "not given" (std::nullopt), and the caller applies
// its default. A value that is given but malformed or out of range is an error naming the variable,
// what it holds and what was expected -- never silently ignored, because a typo in a launch script
// would otherwise run an experiment with the default instead of the setting it names. The complete
// list of RINGGRAD_* variables, with their meaning and default, is docs/environment.md.
//
//   if (auto n = env::integer("RINGGRAD_NUM_THREADS", "threads", 1, 1024)) use(*n);
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>

namespace ringgrad::env {

// The raw value; nullopt when unset or empty.
std::optional<std::string> text(const char* name);

// An integer in [min, max] (decimal); `op` names the caller in the error.
std::optional<int64_t> integer(const char* name, const char* op, int64_t min, int64_t max);

// A finite number greater than `above` (e.g. a positive timeout in seconds).
std::optional<double> number_above(const char* name, const char* op, double above);

// A switch: 1 / true / on, or 0 / false / off.
std::optional<bool> flag(const char* name, const char* op);

// A byte count: a non-negative number, optionally followed by K (KiB) or M (MiB): 65536, 64K, 1.5M.
std::optional<int64_t> bytes(const char* name, const char* op);

// One of `choices`, spelled exactly.
std::optional<std::string> choice(const char* name, const char* op, std::initializer_list<const char*> choices);

}  // namespace ringgrad::env
