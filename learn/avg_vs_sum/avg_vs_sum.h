// Exercise: why DDP averages the gradients instead of summing them (docs/learn/03-why-average.md).
#pragma once

#include "dist/ddp/ddp.h"

namespace learn {

// A DDP communication hook (dist/ddp/comm_hook.h) that leaves the bucket holding the *sum* of the
// ranks' gradients instead of their average -- the mistake the harness measures.
ringgrad::dist::HookWork sum_hook(ringgrad::dist::ProcessGroup& group, ringgrad::dist::GradBucket& bucket);

}  // namespace learn
