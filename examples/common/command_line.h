// Every program's command line behaves the same way, as getopt and argparse programs do:
//   --help      the usage, exit 0
//   --version   "ringgrad 0.1.0" (the library's version, core/version.h), exit 0
//   a mistake   an unknown flag, a missing or bad value: what is wrong and the usage, exit 2,
//               before anything runs (no MPI, no data, no training)
//
//   CLI::App app{"what the program does"};
//   app.add_option("--steps", steps, "...")->check(flags::int_in(1, 1'000'000));
//   if (const auto code = flags::parse_command_line(app, argc, argv)) return *code;
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <string>

#include "core/version.h"

namespace ringgrad::flags {

// Parses argv into app's options. Returns the exit code when the program should stop here.
inline std::optional<int> parse_command_line(CLI::App& app, int argc, const char* const* argv) {
  app.set_version_flag("--version", std::string("ringgrad ") + version());
  app.failure_message(CLI::FailureMessage::help);  // a mistake prints the usage too
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help, --version
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return 2;
  }
  return std::nullopt;
}

}  // namespace ringgrad::flags
