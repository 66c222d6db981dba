#include "dist/kept_until_exit.h"

#include <mutex>
#include <vector>

namespace ringgrad::dist::detail {

void keep_until_exit(std::shared_ptr<void> object) {
  static std::mutex mutex;
  // Allocated once and never destroyed: no destructor at exit frees what MPI may still touch.
  static auto* parked = new std::vector<std::shared_ptr<void>>();
  std::lock_guard lock(mutex);
  parked->push_back(std::move(object));
}

}  // namespace ringgrad::dist::detail
