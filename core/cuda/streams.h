// Streams other than the default one (internal to the CUDA backend and dist/): telling the caching
// allocator that a stream uses a tensor's memory. See Note [Streams and block reuse] in
// core/cuda/allocator.cu.
#pragma once

#include <cuda_runtime.h>

#include "core/tensor.h"

namespace ringgrad::cuda {

// `stream` reads or writes `t`'s memory: when the memory is freed, the allocator hands it out again
// only after the work queued on `stream` so far has finished. The default stream needs no record.
void record_stream(const Tensor& t, cudaStream_t stream);
// Call before destroying a stream that record_stream named (on `device`): waits for its work and
// removes it from the allocator's records, so freeing those tensors later records nothing on it.
void forget_stream(int device, cudaStream_t stream);

}  // namespace ringgrad::cuda
