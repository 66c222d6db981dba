// <immintrin.h> for the CPU kernels with AVX-512 paths (internal to core/cpu/), without GCC 12's
// false warning about its intrinsics: their unmasked forms pass a self-initialised placeholder
// (_mm512_undefined_*) as the unused source, and -Wmaybe-uninitialized reports it wherever they are
// inlined (GCC bug 105593). Nothing reads it. Include it after the standard headers: the warning
// stays off for the rest of the file.
#pragma once

#include <cstdint>

#if defined(__x86_64__)
#include <immintrin.h>

namespace ringgrad::cpu {

// The first `count` of 16 lanes (all for count >= 16, none for count <= 0): the mask of a group's
// last, partial vector.
inline __mmask16 first_lanes(int64_t count) {
  return static_cast<__mmask16>(count >= 16 ? 0xFFFF : count <= 0 ? 0 : (1u << count) - 1);
}

}  // namespace ringgrad::cpu
#endif

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
