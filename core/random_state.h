// The random state of a process as a StateDict, for training checkpoints: the default generator
// and the dropout stream (core/random.h), so that a resumed run draws the same numbers -- layer
// initialisation, dropout masks -- as the run it continues.
//
// Note [Dropout streams in a checkpoint]: a checkpoint is written by one rank, but each rank
// draws its dropout masks from its own stream (Note [Dropout streams per rank]). The streams
// differ only in their seed, which is derived from (default seed, rank); their offsets move
// together, since every rank runs the same ops. So the state records rank 0's offset and whether
// its seed was the derived one, and on load each rank derives its own seed again. A dropout stream
// seeded by hand (dropout_generator().manual_seed) is restored with that seed on every rank.
#pragma once

#include "core/random.h"
#include "core/state_dict.h"

namespace ringgrad {

// {"seed", "offset"}: 0-dim i64 tensors holding the 64-bit values' bits.
StateDict generator_state_dict(const Generator& generator);
void load_generator_state_dict(Generator& generator, const StateDict& state);

// "default.seed" / "default.offset", "dropout.seed" / "dropout.offset", "dropout.streams"
// (0 per rank, 1 the same on every rank) and "dropout.derived" (1 when the dropout seed is
// dropout_seed(default seed, rank)).
StateDict random_state_dict();
// Restores them on this process's rank (random_rank()), deriving its dropout seed as above.
void load_random_state_dict(const StateDict& state);

}  // namespace ringgrad
