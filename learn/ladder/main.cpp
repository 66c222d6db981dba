// The ladder's programs: learn_ladder_1 .. learn_ladder_5, one per rung (LADDER_RUNG), each
// against the rung below it. docs/learn/13-the-ladder.md walks them.
//
//   mpiexec -n 2 build/learn/learn_ladder_1     # ... through learn_ladder_5
#include "learn/ladder/ladder.h"

int main(int argc, char** argv) {
  using namespace learn;
#if LADDER_RUNG == 1
  return climb(argc, argv, make_naive, nullptr);  // against one process on the global batch
#elif LADDER_RUNG == 2
  return climb(argc, argv, make_flat, make_naive);
#elif LADDER_RUNG == 3
  return climb(argc, argv, make_buckets, make_flat);
#elif LADDER_RUNG == 4
  return climb(argc, argv, make_overlap, make_buckets);
#elif LADDER_RUNG == 5
  // no_sync: rung 4 over 4 micro-batches, communicating on the last only, against rung 4
  // communicating on every micro-batch.
  return climb(argc, argv, make_overlap, make_overlap, /*accumulation=*/4);
#else
#error "LADDER_RUNG must be 1 .. 5"
#endif
}
