// RG_HOST_DEVICE marks a function callable from host code and, under nvcc, from device code.
// Elementwise math is written once as such functors (see ../shared/STYLE.md, "One kernel body,
// two launchers"): core/cpu/ loops over them, core/cuda/ runs them in a grid-stride kernel.
#pragma once

#if defined(__CUDACC__)
#define RG_HOST_DEVICE __host__ __device__
#define RG_INLINE __forceinline__
#else
#define RG_HOST_DEVICE
#define RG_INLINE inline
#endif
