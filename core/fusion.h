// Whether ops that have a fused CPU kernel use it, chosen once at start-up.
//
// A fused kernel computes several ops in one pass over data in cache (the convolution block:
// Note [The fused convolution block] in core/cpu/conv_block.cpp). Each keeps the plain composition
// of its ops as its reference: RINGGRAD_FUSION=off runs that composition instead (A/B runs, and the
// tests compare the two), and set_fusion does the same from code. On by default.
// Which kernels are fused, and what each gains: docs/performance.md, "Fused kernels".
#pragma once

namespace ringgrad {

bool fusion_enabled();     // RINGGRAD_FUSION (on / off, default on), or the last set_fusion
void set_fusion(bool on);  // for every later op call

}  // namespace ringgrad
