// Which vector instruction set the CPU kernels use, chosen once at start-up.
//
// The library is compiled for x86-64-v3 (AVX2 + FMA) so that it runs on any CPU of the last decade;
// kernels that gain from wider vectors also carry an AVX-512 version, compiled for AVX-512F through a
// function attribute, and pick it at run time. By default the widest ISA the CPU has is selected
// (CPUID, through __builtin_cpu_supports); RINGGRAD_ISA=avx2|avx512 forces one for A/B runs, and
// set_cpu_isa does the same from code (the tests run every such kernel on both paths). Asking for
// AVX-512 on a CPU without it is an error, never an illegal instruction later.
//
// Which kernels have an AVX-512 path: docs/performance.md, "Vector ISA". The others run their AVX2
// code whatever is selected, so the choice never changes a result beyond what each kernel
// documents (the tiled GEMM's two paths are bit-identical).
#pragma once

#include <string>

namespace ringgrad {

enum class CpuIsa { avx2, avx512 };

const char* cpu_isa_name(CpuIsa isa);  // "avx2", "avx512"
bool cpu_supports(CpuIsa isa);         // this CPU can run kernels of `isa`
CpuIsa cpu_isa();                      // the selected ISA (RINGGRAD_ISA, else the widest supported)
void set_cpu_isa(CpuIsa isa);          // select `isa` for every later kernel call; throws if unsupported

// Whether bf16 products run on AVX512_BF16's dot-product instruction (core/cpu/bf16_gemm.cpp): the
// CPU has it (with AVX512BW / VL) and AVX-512 is selected. Otherwise bf16 products compute in f32.
bool cpu_has_bf16_dot();

// What the CPU kernels use, for start-up lines: "avx512, bf16 dot products" or "avx2".
std::string cpu_kernels_description();

}  // namespace ringgrad
