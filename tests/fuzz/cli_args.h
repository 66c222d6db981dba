// The command-line fuzz targets' input: one argument per line (at most 64), after the program name.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "tests/fuzz/fuzz_util.h"

namespace ringgrad::fuzz {

inline std::vector<std::string> split_args(const uint8_t* data, size_t size) {
  std::vector<std::string> args{"program"};
  std::string current;
  for (size_t i = 0; i < size && args.size() <= 64; ++i) {
    const char ch = static_cast<char>(data[i]);
    if (ch == '\n') {
      args.push_back(current);
      current.clear();
    } else if (ch != '\0') {  // argv entries cannot hold NUL
      current.push_back(ch);
    }
  }
  if (!current.empty()) args.push_back(current);
  return args;
}

// Parses args with app, then runs finish(). Returns whether both succeeded. A CLI11 parse error is
// a clear error (CLI11 names the flag); finish()'s ringgrad::Error must name a flag ("--").
template <class Finish>
bool parse_flags(CLI::App& app, const std::vector<std::string>& args, Finish&& finish) {
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::ParseError&) {
    return false;
  } catch (const std::exception& e) {
    finding(std::string("CLI11 threw something other than a ParseError: ") + e.what());
  }
  bool ok = false;
  expect_success_or_clear_error("--", [&] {
    finish();
    ok = true;
  });
  return ok;
}

}  // namespace ringgrad::fuzz
