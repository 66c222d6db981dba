// The library's version, as CMakeLists.txt's project() declares it ("0.1.0"): what every program's
// --version prints, and what a user can log beside a run's results.
#pragma once

namespace ringgrad {

const char* version();

}  // namespace ringgrad
