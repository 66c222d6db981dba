// Every program's command line behaves the same way, as getopt and argparse programs do:
//   --help      the usage, exit 0
//   --version   "ringgrad 0.1.0" (the library's version, core/version.h), exit 0
//   a mistake   an unknown flag, a missing or bad value: what is wrong and the usage, exit 2,
//               before anything runs (no MPI, no data, no training)
//
//   CLI::App app{"what the program does"};
//   app.add_option("--steps", steps, "...")->check(flags::int_in(1, 1'000'000));
//   if (const auto code = flags::parse_command_line(app, argc, argv)) return *code;
//
// A program without flags of its own needs no CLI::App:
//   if (const auto code = flags::parse_no_flags(argc, argv, "what the program does")) return *code;
//
// CLI11 is a header-only library whose header costs seconds of compile time in every file that
// includes it, so this header only names CLI::App: the parsing lives in command_line.cpp (library
// ringgrad_command_line), and a program includes <CLI/CLI.hpp> in the one file that declares its flags.
#pragma once

#include <optional>
#include <string>

namespace CLI {
class App;
}

namespace ringgrad::flags {

// Parses argv into app's options. Returns the exit code when the program should stop here.
std::optional<int> parse_command_line(CLI::App& app, int argc, const char* const* argv);

// The same for a program that takes no flags: only --help (the usage, with `about`) and --version;
// anything else is a mistake (exit 2).
std::optional<int> parse_no_flags(int argc, const char* const* argv, const std::string& about);

}  // namespace ringgrad::flags
