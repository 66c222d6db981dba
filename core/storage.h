// Storage: a refcounted block of bytes on one device. Tensors are views onto a storage (shape,
// strides, offset); several views share one storage through std::shared_ptr<Storage>.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>

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

  // Throws when the memory is released (see release()).
  void* data() const {
    if (released_) [[unlikely]]
      fail_released();
    return data_;
  }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  bool pinned() const { return pinned_; }
  StorageOwner* owner() const { return owner_.get(); }  // null unless wrapped with one

  // Note [Released storage]: memory from the allocator can be given back while every view of it
  // stays, and taken again later in the same place of those views (new bytes, same Storage). ZeRO
  // stage 3 does this with a unit's gathered parameters between its uses (dist/zero/
  // gathered_units.h), as FSDP resizes a flat parameter's storage to 0: the model's parameters
  // and the graph's saved tensors keep pointing at this Storage, and read the gathered values
  // again once it is materialised. While released, data() throws `why` -- what released it and
  // how to get the values -- so a stray read is an error that names the tensor, never a read of
  // freed memory. Only storage this class allocated can be released.
  void release(std::string why);
  void materialize();  // allocates nbytes() again; the contents are undefined until written
  bool released() const { return released_; }

 private:
  [[noreturn]] void fail_released() const;
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  bool from_allocator_ = false;
  bool pinned_ = false;
  bool released_ = false;
  std::string released_why_;
  std::function<void(void*)> deleter_;
  std::shared_ptr<StorageOwner> owner_;
};

}  // namespace ringgrad
