// ringgrad: the umbrella header for users. `#include <ringgrad.h>` brings in the whole public API.
#pragma once

#include "autograd/activation_checkpoint.h"
#include "autograd/engine.h"
#include "autograd/gradcheck.h"
#include "autograd/node.h"
#include "core/allocator.h"
#include "core/cpu_isa.h"
#include "core/device.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/ops.h"
#include "core/parallel.h"
#include "core/random.h"
#include "core/random_state.h"
#include "core/tensor.h"
#include "core/trace.h"
#include "data/data.h"
#include "nn/nn.h"
#ifdef RINGGRAD_WITH_MPI
#include "dist/consistency.h"
#include "dist/ddp/ddp.h"
#include "dist/ddp/join.h"
#include "dist/init.h"
#include "dist/process_group.h"
#include "dist/zero/zero_optimizer.h"
#endif
#include "optim/optim.h"
