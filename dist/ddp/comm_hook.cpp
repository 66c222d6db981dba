#include "dist/ddp/comm_hook.h"

#include "core/error.h"
#include "core/ops.h"

namespace ringgrad::dist {

Averaging average_over(const ProcessGroup& group, DType dtype) {
  if (group.size() > 1 && dtype == DType::f16 && group.adds_in_dtype(dtype))
    return {.pre_scale = 1.0 / group.size(), .op = ReduceOp::sum};
  return {};
}

HookWork allreduce_hook(ProcessGroup& group, GradBucket& bucket) {
  // Note [Average, not sum] in dist/ddp/ddp.h; Note [Averaging half precision].
  const Averaging averaging = average_over(group, bucket.buffer.dtype());
  if (averaging.pre_scale != 1) bucket.buffer.mul_(averaging.pre_scale);
  return {group.allreduce(bucket.buffer, averaging.op), nullptr};
}

HookWork fp16_compress_hook(ProcessGroup& group, GradBucket& bucket) {
  RG_CHECK(bucket.buffer.dtype() == DType::f32, "dist.fp16_compress_hook", "expects f32 gradients, but bucket ",
           bucket.index, " is ", dtype_name(bucket.buffer.dtype()), " (rank ", group.rank(), "/", group.size(), ")");
  Tensor buffer = bucket.buffer;
  buffer.mul_(1.0 / group.size());  // in f32, so the f16 copy holds the (in-range) average's terms
  Tensor half = buffer.to(DType::f16);
  return {group.allreduce(half, ReduceOp::sum), [buffer, half]() mutable { buffer.copy_(half); }};
}

CommHook comm_hook_by_name(const std::string& name) {
  if (name == "allreduce") return allreduce_hook;
  if (name == "fp16") return fp16_compress_hook;
  RG_FAIL("dist.comm_hook_by_name", "unknown communication hook '", name, "'; available: allreduce, fp16");
}

}  // namespace ringgrad::dist
