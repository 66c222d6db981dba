// Memory MPI may still write into after a timeout (Note [After a timeout] in dist/comm_thread.h):
// an abandoned op's buffers, a broken group's scratch. It is never freed -- freeing it under MPI's
// feet could corrupt whatever reuses it -- but it is parked on a process-wide list rather than
// dropped, so that it stays reachable: LeakSanitizer then does not report it as lost, and a real
// leak elsewhere still stands out.
#pragma once

#include <memory>

namespace ringgrad::dist::detail {

// Keeps `object` alive, and reachable, until the process exits. Thread-safe.
void keep_until_exit(std::shared_ptr<void> object);

}  // namespace ringgrad::dist::detail
