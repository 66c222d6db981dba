// ringgrad: the umbrella header for users. `#include <ringgrad.h>` brings in the whole public API.
#pragma once

#include "core/allocator.h"
#include "core/device.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/ops.h"
#include "core/parallel.h"
#include "core/random.h"
#include "core/tensor.h"
#include "core/trace.h"
#include "autograd/engine.h"
#include "autograd/gradcheck.h"
#include "autograd/node.h"
#include "data/data.h"
#include "nn/nn.h"
#ifdef RINGGRAD_WITH_MPI
#include "dist/init.h"
#include "dist/process_group.h"
#include "dist/ddp/ddp.h"
#endif
#include "optim/optim.h"
