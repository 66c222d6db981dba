// nn::Module: the base of every layer and model.
//
// A module owns named parameters (tensors that require grad), buffers (state that is saved but not
// trained) and child modules, each registered in the constructor. named_parameters() walks them
// recursively in registration order with dotted names ("fc1.weight"); that order is deterministic
// and the same on every rank, which the distributed module relies on (DDP buckets are built from it).
//
// Modules are held by std::shared_ptr, as libtorch's C++ frontend does:
//   auto model = std::make_shared<Net>();
//   optim::SGD opt(model->parameters(), {.lr = 0.05});
//
// Parameters are Tensor handles. Module::to(device / dtype) converts them in place (the handles keep
// pointing at the converted tensors). Convert before building the optimizer: its state is sized for
// the dtypes it saw, so to(dtype) on a parameter an optimizer holds is an error naming the parameter
// (Note [Parameters an optimizer holds], nn/dtype_hold.h).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "nn/state_dict.h"

namespace ringgrad::nn {

class Module : public std::enable_shared_from_this<Module> {
 public:
  explicit Module(std::string type_name = "Module") : type_name_(std::move(type_name)) {}
  virtual ~Module();
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // Single-tensor forward, used by Sequential and by the examples. Modules with other signatures
  // define their own forward and leave this one throwing.
  virtual Tensor forward(const Tensor& input);
  // forward(input), and an error raised inside it names this module's place in the model:
  //   [linear] input (8, 32, 7, 7) f32 cpu does not end in in_features = 1568 ...
  //     in module 'head.fc' (Linear)
  // The innermost module called this way names itself (its path from the root), so call children
  // as (*child)(x) rather than child->forward(x) for the message to say which one failed.
  Tensor operator()(const Tensor& input);
  // Activation checkpointing for this module's calls through operator(): with grad mode on, the tensors its forward saves for backward are dropped when the forward ends and
  // recomputed from its input during backward (autograd/activation_checkpoint.h). Parameter names,
  // gradients and checkpoints are unchanged; memory falls by this module's activations, compute
  // rises by one more forward of it. Set it per block (each GPT block), not on a whole model: the
  // recompute needs as much memory as the checkpointed module's activations.
  void checkpoint_activations(bool on = true) { checkpoint_activations_ = on; }
  bool activations_checkpointed() const { return checkpoint_activations_; }
  // ---- forward hooks (PyTorch's register_forward_pre_hook / register_forward_hook) ---------------
  // Around every call through operator(), in registration order: pre-hooks see the input before
  // forward (and may replace it by returning a defined tensor), hooks see input and output after it
  // (and may replace the output). They run outside activation checkpointing: a checkpointed
  // module's own hooks fire once per call, not again in its recompute (its children's, called
  // through operator() inside its forward, do fire again; autograd::recomputing() tells them).
  // An error a hook throws names this module, as forward's do. Returns a handle for removal.
  using ForwardPreHook = std::function<Tensor(Module& module, const Tensor& input)>;
  using ForwardHook = std::function<Tensor(Module& module, const Tensor& input, const Tensor& output)>;
  int register_forward_pre_hook(ForwardPreHook hook);
  int register_forward_hook(ForwardHook hook);
  // Removes the hook with this handle (of either kind); false if there was none.
  bool remove_forward_hook(int handle);
  bool has_forward_hooks() const { return !forward_pre_hooks_.empty() || !forward_hooks_.empty(); }

  // Dotted path from the module that registered this one first, up to the root ("" for the root):
  // the names named_modules() gives it from the root.
  std::string path() const;

  const std::string& type_name() const { return type_name_; }

  // ---- registration (call from constructors) ----------------------------------------------------
  Tensor register_parameter(const std::string& name, Tensor tensor, bool requires_grad = true);
  Tensor register_buffer(const std::string& name, Tensor tensor);
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    add_child(name, module);
    return module;
  }

  // ---- traversal --------------------------------------------------------------------------------
  std::vector<std::pair<std::string, Tensor>> named_parameters(bool recurse = true) const;
  std::vector<Tensor> parameters(bool recurse = true) const;
  std::vector<std::pair<std::string, Tensor>> named_buffers(bool recurse = true) const;
  // This module (named "") and every descendant, depth first in registration order, with dotted
  // names ("block.fc1"), as PyTorch's named_modules(). The pointers are views: valid while this
  // module lives.
  std::vector<std::pair<std::string, Module*>> named_modules();
  // Calls fn(name, module) for this module and every descendant, in named_modules() order (e.g. to
  // initialise every Linear: dynamic_cast inside fn).
  void apply(const std::function<void(const std::string& name, Module& module)>& fn);
  int64_t parameter_count() const;  // total number of parameter elements

  // ---- mode and placement ---------------------------------------------------------------------
  virtual void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }
  // Converts every parameter and buffer in place (floating buffers only for dtype).
  void to(Device device);
  void to(DType dtype);
  void zero_grad(bool set_to_none = true);

  // ---- state ------------------------------------------------------------------------------------
  // Parameters first, then buffers, in registration order, with dotted names.
  StateDict state_dict() const;
  // Copies values into this module's tensors and says which keys did not match.
  // strict: missing and unexpected keys are errors; with strict = false they are skipped and
  // reported. Always errors: a shape mismatch (a value cannot be loaded into another shape) and,
  // when both sides have keys, a state none of whose keys this module has (loading nothing is
  // never what was meant). Nothing is modified unless every check passes.
  LoadResult load_state_dict(const StateDict& state, bool strict = true);

  // A printed table: parameter names, shapes, dtypes, and the total count.
  std::string summary() const;

 protected:
  void add_child(const std::string& name, std::shared_ptr<Module> child);
  // Rethrows the ringgrad::Error being handled with this module's path appended (once: an error
  // that already names a module is rethrown as it is). Call from a catch block.
  [[noreturn]] void rethrow_with_path() const;
  // The same for another module (a container that runs its children's work itself, as Sequential's
  // fused convolution block does).
  [[noreturn]] static void rethrow_with_path_of(const Module& module) { module.rethrow_with_path(); }

 private:
  Tensor call_forward(const Tensor& input);  // forward, through a checkpoint when it is set
  void collect(const std::string& prefix, bool recurse, bool buffers,
               std::vector<std::pair<std::string, Tensor>>& out) const;

  std::string type_name_;
  bool training_ = true;
  bool checkpoint_activations_ = false;
  int next_hook_handle_ = 0;
  std::vector<std::pair<int, ForwardPreHook>> forward_pre_hooks_;
  std::vector<std::pair<int, ForwardHook>> forward_hooks_;
  std::vector<std::pair<std::string, Tensor>> parameters_;
  std::vector<std::pair<std::string, Tensor>> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  // The module that registered this one first, and the name it gave: for path(). A raw pointer:
  // a parent clears it in its children when it is destroyed first (~Module).
  Module* parent_ = nullptr;
  std::string name_in_parent_;
};

// Replaces the contents of `t` (storage, layout, dtype) with those of `value`, keeping the handle's
// identity, so every holder of `t` sees the change. Autograd state (requires_grad) is kept; .grad is
// dropped when the dtype or device changes.
void assign_in_place(const Tensor& t, const Tensor& value);

}  // namespace ringgrad::nn
