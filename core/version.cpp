#include "core/version.h"

namespace ringgrad {

// RINGGRAD_VERSION_STRING comes from CMake (core/CMakeLists.txt), so that the number lives in one
// place.
const char* version() { return RINGGRAD_VERSION_STRING; }

}  // namespace ringgrad
