// Tensor: a strided view (shape, strides, offset) of a refcounted Storage, with a dtype and a device,
// plus the autograd state (requires_grad, grad, grad_fn) when it takes part in differentiation.
//
// Copying a Tensor copies a handle: both refer to the same TensorImpl (like torch::Tensor).
// Strides and offset are counted in elements, not bytes.
//
// The differentiable operations are declared in core/ops.h; the methods here forward to them.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/storage.h"

namespace ringgrad {

using Shape = std::vector<int64_t>;

int64_t shape_numel(const Shape& shape);
std::string shape_str(const Shape& shape);     // "(32, 784)"
Shape contiguous_strides(const Shape& shape);  // row-major

namespace autograd {
class Node;
struct AutogradMeta;
}  // namespace autograd

// Destroys a TensorImpl's autograd state. core/ only names that type (autograd/node.h defines it, and
// core/ includes nothing of autograd/), so whoever creates the state hands over how to destroy it.
struct AutogradMetaDeleter {
  void (*destroy)(autograd::AutogradMeta*) = nullptr;
  void operator()(autograd::AutogradMeta* meta) const { destroy(meta); }
};

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  Shape shape;
  Shape strides;
  int64_t offset = 0;
  DType dtype = DType::f32;
  std::unique_ptr<autograd::AutogradMeta, AutogradMetaDeleter> autograd;  // null until autograd needs it

  TensorImpl();
  ~TensorImpl();
};

// Options for factories, set with designated initialisers: zeros({2, 3}, {.dtype = DType::f16}).
// An unset dtype means f32, except for from_vector of int64 values, which gives i64.
struct TensorOptions {
  std::optional<DType> dtype;
  Device device = Device::cpu();
  bool requires_grad = false;
};

class Tensor {
 public:
  Tensor() = default;  // an undefined tensor (no storage); defined() is false
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // ---- metadata -------------------------------------------------------------------------------
  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const { return checked()->shape; }
  const Shape& strides() const { return checked()->strides; }
  int64_t dim() const { return static_cast<int64_t>(shape().size()); }
  int64_t size(int64_t d) const;  // negative d counts from the end
  int64_t stride(int64_t d) const;
  int64_t offset() const { return checked()->offset; }
  int64_t numel() const { return shape_numel(shape()); }
  DType dtype() const { return checked()->dtype; }
  Device device() const { return checked()->storage->device(); }
  size_t element_size() const { return dtype_size(dtype()); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * element_size(); }
  bool is_contiguous() const;
  const std::shared_ptr<Storage>& storage() const { return checked()->storage; }
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool is_same(const Tensor& o) const { return impl_ == o.impl_; }
  // "(32, 784) f32 cpu": how errors describe a tensor.
  std::string desc() const;

  // Pointer to this view's first element (storage data + offset).
  void* raw_data() const;
  template <class T>
  T* data() const {
    RG_CHECK(dtype_of<T>() == dtype(), "data", "requested ", dtype_name(dtype_of<T>()), " pointer from a ", desc(),
             " tensor");
    return static_cast<T*>(raw_data());
  }

  // ---- values ---------------------------------------------------------------------------------
  double item() const;  // the single element of a 1-element tensor, converted to double
  template <class T>
  T item() const {
    return static_cast<T>(item());
  }
  std::vector<double> to_vector() const;  // all elements in row-major order, as double
  std::string str() const;                // printed form, abbreviated for large tensors

  // ---- autograd (see autograd/engine.h for the backward contract) ------------------------------
  bool requires_grad() const;
  Tensor& requires_grad_(bool enabled = true);
  bool is_leaf() const;
  std::shared_ptr<autograd::Node> grad_fn() const;
  Tensor grad() const;                // undefined until a backward reached this tensor
  void set_grad(const Tensor& grad);  // may be a view into caller-owned storage (DDP buckets)
  void zero_grad(bool set_to_none = true);
  Tensor detach() const;  // same storage, no autograd history
  // Runs backward from this tensor. A non-scalar needs an explicit `grad` of the same shape.
  void backward(const Tensor& grad = Tensor(), bool retain_graph = false) const;
  // Registers a hook run right after this leaf's .grad is final for the current backward
  // (see autograd/engine.h, "Post-accumulate-grad hooks"). Returns a handle for remove_hook.
  int register_post_accumulate_grad_hook(std::function<void(Tensor&)> hook);
  void remove_post_accumulate_grad_hook(int handle);
  void retain_grad();  // keep .grad on a non-leaf too

  // ---- views: no copy, share storage (differentiable) ----------------------------------------
  Tensor view(const Shape& shape) const;     // needs a compatible layout; -1 infers one dim
  Tensor reshape(const Shape& shape) const;  // view when possible, else copy
  Tensor transpose(int64_t d0, int64_t d1) const;
  Tensor t() const;  // 2-D transpose
  Tensor permute(const Shape& dims) const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor select(int64_t dim, int64_t index) const;  // drops `dim`
  Tensor expand(const Shape& shape) const;          // broadcasting view (stride 0)
  Tensor squeeze() const;
  Tensor squeeze(int64_t dim) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor contiguous() const;  // self when already contiguous, else a copy

  // ---- conversion -----------------------------------------------------------------------------
  Tensor to(DType dtype) const;  // self when already that dtype
  // Self when already there. non_blocking: a copy from pinned memory to a GPU returns at once
  // (queued before any kernel launched later); see pin_memory().
  Tensor to(Device device, bool non_blocking = false) const;
  // A copy in page-locked host memory (self when already pinned), whose copies to a GPU can be
  // asynchronous; CUDA builds only. The DataLoader pins its batches with DataLoaderOptions::pin_memory.
  Tensor pin_memory() const;
  bool is_pinned() const;
  Tensor clone() const;

  // ---- in-place (for optimizers and initialisers; not recorded by autograd) -------------------
  Tensor& fill_(double value);
  Tensor& zero_();
  Tensor& copy_(const Tensor& src);                       // broadcasts src, converts dtype, crosses devices
  Tensor& add_(const Tensor& other, double alpha = 1.0);  // self += alpha * other
  Tensor& sub_(const Tensor& other);
  Tensor& mul_(const Tensor& other);
  Tensor& div_(const Tensor& other);
  Tensor& add_(double value);
  Tensor& mul_(double value);
  Tensor& clamp_(double lo, double hi);
  // Copies this tensor's elements into `place` (same shape, dtype and device: usually a view of a
  // larger buffer) and makes this tensor -- every handle of it, with its autograd identity, .grad
  // and hooks -- a view of place's storage from then on: PyTorch's `p.data = place.copy_(p)`, for
  // code that lays parameters out in one flat buffer (dist::ZeroOptimizer, Note [Parameters in
  // shared memory]). Views of this tensor taken before keep the old storage, so take it before
  // anything holds one (an optimizer's pieces, a graph awaiting backward).
  void move_into(const Tensor& place);

  // ---- math (differentiable; see core/ops.h) --------------------------------------------------
  Tensor sum(const Shape& dims = {}, bool keepdim = false) const;  // {} = all dims
  Tensor mean(const Shape& dims = {}, bool keepdim = false) const;
  Tensor max(int64_t dim, bool keepdim = false) const;
  Tensor argmax(int64_t dim, bool keepdim = false) const;
  Tensor var(const Shape& dims = {}, bool keepdim = false, bool unbiased = true) const;
  Tensor exp() const;
  Tensor log() const;
  Tensor sqrt() const;
  Tensor tanh() const;
  Tensor sigmoid() const;
  Tensor relu() const;
  Tensor pow(double exponent) const;
  Tensor abs() const;
  Tensor matmul(const Tensor& other) const;
  Tensor softmax(int64_t dim) const;
  Tensor log_softmax(int64_t dim) const;

 private:
  TensorImpl* checked() const {
    if (!impl_) throw Error("[tensor] use of an undefined tensor");
    return impl_.get();
  }
  std::shared_ptr<TensorImpl> impl_;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);

// Normalises a possibly negative dimension index for a tensor of `ndim` dims; `op` names the caller.
int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op);

// A new tensor header (no autograd state) viewing `storage`.
Tensor make_view(const std::shared_ptr<Storage>& storage, Shape shape, Shape strides, int64_t offset, DType dtype);

}  // namespace ringgrad
