#include "core/storage.h"

#include <utility>

#include "core/allocator.h"

namespace ringgrad {

Storage::Storage(size_t nbytes, Device device)
    : data_(allocator_for(device).allocate(nbytes)), nbytes_(nbytes), device_(device), from_allocator_(true) {}

Storage::Storage(void* data, size_t nbytes, Device device, std::function<void(void*)> deleter, bool pinned)
    : data_(data), nbytes_(nbytes), device_(device), pinned_(pinned), deleter_(std::move(deleter)) {}

Storage::Storage(void* data, size_t nbytes, Device device, std::shared_ptr<StorageOwner> owner)
    : data_(data), nbytes_(nbytes), device_(device), owner_(std::move(owner)) {}

Storage::~Storage() {
  if (from_allocator_) {
    allocator_for(device_).deallocate(data_, nbytes_);
  } else if (deleter_) {
    deleter_(data_);
  }
}

}  // namespace ringgrad
