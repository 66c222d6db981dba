// Counter-based random numbers (Philox-4x32-10, Salmon et al., "Parallel Random Numbers: As Easy as
// 1, 2, 3", SC'11).
//
// Philox maps (counter, key) to four 32-bit words with no hidden state, so element i of a random tensor
// can be computed by whichever thread (or CUDA thread) handles i: element i uses counter
// (offset + i / 4) and word i % 4. The same seed therefore gives the same tensor on any thread count
// and on any device. A Generator only remembers its seed and how many counters it has used.
#pragma once

#include <cstdint>

#include "core/host_device.h"

namespace ringgrad {

struct Philox4x32 {
  uint32_t v[4];
};

// One Philox-4x32-10 evaluation: ten rounds of multiply-xor with a bumped key.
RG_HOST_DEVICE RG_INLINE Philox4x32 philox4x32(uint64_t counter_lo, uint64_t counter_hi, uint64_t key) {
  uint32_t c0 = static_cast<uint32_t>(counter_lo), c1 = static_cast<uint32_t>(counter_lo >> 32);
  uint32_t c2 = static_cast<uint32_t>(counter_hi), c3 = static_cast<uint32_t>(counter_hi >> 32);
  uint32_t k0 = static_cast<uint32_t>(key), k1 = static_cast<uint32_t>(key >> 32);
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(0xD2511F53u) * c0;
    const uint64_t p1 = static_cast<uint64_t>(0xCD9E8D57u) * c2;
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
    k0 += 0x9E3779B9u;  // golden ratio
    k1 += 0xBB67AE85u;  // sqrt(3) - 1
  }
  return Philox4x32{{c0, c1, c2, c3}};
}

// A 32-bit word to a float in [0, 1) with 24 random bits (exactly representable).
RG_HOST_DEVICE RG_INLINE float uint_to_unit_float(uint32_t x) {
  return static_cast<float>(x >> 8) * (1.0f / 16777216.0f);
}

// Whether dropout keeps element e of a tensor (probability 1 - rate): the draw of element e under
// (seed, offset) as above. Attention dropout recomputes its mask from these three numbers in the
// backward instead of storing it; the CPU (core/cpu/rows.h) and CUDA kernels draw alike.
RG_HOST_DEVICE RG_INLINE bool dropout_keep(uint64_t seed, uint64_t offset, uint64_t e, float rate) {
  return uint_to_unit_float(philox4x32(offset + e / 4, 0, seed).v[e % 4]) >= rate;
}

class Generator {
 public:
  explicit Generator(uint64_t seed = 0) : seed_(seed) {}
  uint64_t seed() const { return seed_; }
  uint64_t offset() const { return offset_; }  // counters consumed so far
  void manual_seed(uint64_t seed) {
    seed_ = seed;
    offset_ = 0;
  }
  void set_offset(uint64_t offset) { offset_ = offset; }  // restoring a checkpointed state
  // Reserves `counters` consecutive counters and returns the first one.
  uint64_t advance(uint64_t counters) {
    const uint64_t first = offset_;
    offset_ += counters;
    return first;
  }

 private:
  uint64_t seed_;
  uint64_t offset_ = 0;
};

// The process-wide default generator, for code that does not pass one explicitly (layer
// initialisation, dropout), as torch.manual_seed seeds PyTorch's. Pass a Generator explicitly where
// reproducibility across components matters.
Generator& default_generator();

// Note [Dropout streams per rank]: dropout (nn::Dropout, functional::dropout, attention dropout)
// draws from dropout_generator() when it is given no generator. Data parallelism seeds every rank
// alike, so that the replicas start equal; drawn from that one stream, every rank would drop the
// same units of its different examples, which is not the dropout the mean over N·B examples assumes.
// So by default the dropout stream's seed mixes the default seed with the process's rank
// (dropout_seed below; dist::init tells it the rank): each rank its own masks, reproducible from
// (seed, rank). DropoutStreams::same_on_every_rank uses the default seed unchanged on every rank,
// for identical masks (a test comparing ranks, a run matching a one-process one).
enum class DropoutStreams { per_rank, same_on_every_rank };
Generator& dropout_generator();
void set_dropout_streams(DropoutStreams streams);  // reseeds the dropout stream (offset 0)
DropoutStreams dropout_streams();
// The rank whose stream this process draws (0 until dist::init); reseeds the dropout stream.
void set_random_rank(int rank);
int random_rank();
// The dropout stream's seed for a default seed and a rank under the current DropoutStreams.
uint64_t dropout_seed(uint64_t seed, int rank);

// Seeds the default generator, and the dropout stream from it (dropout_seed(seed, rank)).
void manual_seed(uint64_t seed);

}  // namespace ringgrad
