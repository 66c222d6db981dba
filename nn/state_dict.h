// nn::StateDict and nn::LoadResult: the core types (core/state_dict.h) under the names module code
// uses. A header of its own so that code which only passes state around (the optimizers) need not
// include nn::Module.
#pragma once

#include "core/state_dict.h"

namespace ringgrad::nn {

using ringgrad::LoadResult;
using ringgrad::StateDict;
using ringgrad::with_prefix;  // core/state_dict.h
using ringgrad::with_prefix_removed;

}  // namespace ringgrad::nn
