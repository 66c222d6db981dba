// <immintrin.h> for the CPU kernels with AVX-512 paths (internal to core/cpu/), without GCC 12's
// false warning about its intrinsics: their unmasked forms pass a self-initialised placeholder
// (_mm512_undefined_*) as the unused source, and -Wmaybe-uninitialized reports it wherever they are
// inlined (GCC bug 105593). Nothing reads it. Include it after the standard headers: the warning
// stays off for the rest of the file.
#pragma once

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
