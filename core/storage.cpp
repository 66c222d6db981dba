#include "core/storage.h"

#include <utility>

#include "core/allocator.h"
#include "core/error.h"

namespace ringgrad {

Storage::Storage(size_t nbytes, Device device)
    : data_(allocator_for(device).allocate(nbytes)), nbytes_(nbytes), device_(device), from_allocator_(true) {}

Storage::Storage(void* data, size_t nbytes, Device device, std::function<void(void*)> deleter, bool pinned)
    : data_(data), nbytes_(nbytes), device_(device), pinned_(pinned), deleter_(std::move(deleter)) {}

Storage::Storage(void* data, size_t nbytes, Device device, std::shared_ptr<StorageOwner> owner)
    : data_(data), nbytes_(nbytes), device_(device), owner_(std::move(owner)) {}

Storage::~Storage() {
  if (released_) return;
  if (from_allocator_) {
    allocator_for(device_).deallocate(data_, nbytes_);
  } else if (deleter_) {
    deleter_(data_);
  }
}

}  // namespace ringgrad

namespace ringgrad {

void Storage::release(std::string why) {
  RG_CHECK(from_allocator_, "Storage.release", "only memory from the allocator can be released, not ", nbytes_,
           " bytes on ", device_.str(), " owned elsewhere");
  if (released_) return;
  allocator_for(device_).deallocate(data_, nbytes_);
  data_ = nullptr;
  released_ = true;
  released_why_ = std::move(why);
}

void Storage::materialize() {
  if (!released_) return;
  data_ = allocator_for(device_).allocate(nbytes_);
  released_ = false;
  released_why_.clear();
}

void Storage::fail_released() const {
  RG_FAIL("Storage", "the ", nbytes_, " bytes on ", device_.str(), " behind this tensor are released: ", released_why_);
}

}  // namespace ringgrad
