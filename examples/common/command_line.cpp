#include "examples/common/command_line.h"

#include <CLI/CLI.hpp>

#include "core/version.h"

namespace ringgrad::flags {

std::optional<int> parse_command_line(CLI::App& app, int argc, const char* const* argv) {
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

std::optional<int> parse_no_flags(int argc, const char* const* argv, const std::string& about) {
  CLI::App app{about};
  return parse_command_line(app, argc, argv);
}

}  // namespace ringgrad::flags
