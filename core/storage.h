// Storage: a refcounted block of bytes on one device. Tensors are views onto a storage (shape,
// strides, offset); several views share one storage through std::shared_ptr<Storage>.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>

#include "core/device.h"

namespace ringgrad {

// What owns memory that a Storage wraps, when it is more than a deleter: kept alive as long as the
// storage is, and askable (dynamic_cast) for what it can do with that memory. dist/'s shared
// reduction buffers carry their own in-place collectives this way (dist/staging.h, InPlaceBuffer).
class StorageOwner {
 public:
  virtual ~StorageOwner() = default;
};

class Storage {
 public:
  // Allocates `nbytes` from the device's allocator (see core/allocator.h).
  Storage(size_t nbytes, Device device);
  // Wraps memory owned elsewhere; `deleter` (may be empty) runs when the last view goes away.
  // `pinned`: page-locked host memory (core/cuda/pinned.cu), which copies to a GPU can read
  // asynchronously.
  Storage(void* data, size_t nbytes, Device device, std::function<void(void*)> deleter, bool pinned = false);
  // Wraps memory that `owner` owns (and releases when the last holder lets it go).
  Storage(void* data, size_t nbytes, Device device, std::shared_ptr<StorageOwner> owner);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  bool pinned() const { return pinned_; }
  StorageOwner* owner() const { return owner_.get(); }  // null unless wrapped with one

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  bool from_allocator_ = false;
  bool pinned_ = false;
  std::function<void(void*)> deleter_;
  std::shared_ptr<StorageOwner> owner_;
};

}  // namespace ringgrad
