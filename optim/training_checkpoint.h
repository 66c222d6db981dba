// TrainingCheckpoint: everything a training run needs to continue exactly, saved and loaded in one
// call each -- the model, the optimizer (its state keyed by parameter name), the gradient scaler,
// the data loader's epoch and position, counters such as the step, the random generators (default
// and dropout) and user metadata.
//
//   optim::TrainingCheckpoint ckpt;
//   ckpt.add("model", *model).add_optimizer("optimizer", *opt, *model).add("scaler", scaler)
//       .add("loader", loader).add("step", step);
//   dist::sync_checkpoint(ckpt, group);          // under data parallelism: rank 0 writes, all agree
//   if (resume) std::cout << ckpt.load(path).describe();
//   for (int64_t epoch = loader.sampler().epoch(); epoch < epochs; ++epoch) {
//     loader.sampler().set_epoch(epoch);
//     for (const data::Example& batch : loader) { ...; ++step; if (step % 100 == 0) ckpt.save(path); }
//   }
//
// Anything with state_dict() and load_state_dict(const StateDict&) can be added (the Stateful
// concept below): modules, GradScaler, DataLoader, DistributedSampler, a user's own class. The
// checkpoint holds references; the objects must outlive it (or be added as shared_ptr).
//
// File layout: one checkpoint file (nn/checkpoint.h: checksummed, written to a temporary and
// renamed, so a crash leaves the old file or the new one) whose entries are "<component>.<key>",
// plus "rng.*" (core/random_state.h), "meta.<key>" and "checkpoint.format" / ".world_size".
// Files without "checkpoint.format" -- training checkpoints assembled by hand under the prefixes
// "model.", "optimizer." (state keyed by index), "scaler.", "rng." -- are translated on load
// (report().legacy_layout says so), and what cannot be translated is reported, by key.
//
// Writing: the replicas of data parallelism are equal, so one rank -- rank 0 -- writes and the others
// do not (the dropout streams differ by rank, and are derived again on load: Note [Dropout streams
// in a checkpoint], core/random_state.h). dist::sync_checkpoint tells the checkpoint its rank and
// makes every rank learn whether the write succeeded, so that a failed write is an error on every
// rank rather than on rank 0 alone. Without it the writer is the rank core/random.h knows
// (random_rank(), which dist::init sets), and other ranks return at once.
//
// Loading reads and checks the whole file, then loads each component. When any component refuses
// its state, the ones already loaded are put back as they were, so a failed load changes nothing.
#pragma once

#include <concepts>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "core/state_dict.h"
#include "nn/module.h"
#include "optim/optimizer.h"

namespace ringgrad::optim {

template <class T>
concept Stateful = requires(T& object, const T& const_object, const StateDict& state) {
  { const_object.state_dict() } -> std::convertible_to<StateDict>;
  object.load_state_dict(state);
};

using MetadataValue = std::variant<int64_t, double, std::string>;

struct CheckpointLoadOptions {
  // Components registered here but absent from the file, and components in the file not
  // registered here, are errors; with strict = false they are skipped and reported.
  bool strict = true;
  bool random_state = true;  // restore the default and dropout generators
};

// What a load matched.
struct CheckpointReport {
  std::string path;
  bool legacy_layout = false;                // a file without "checkpoint.format", translated
  std::vector<std::string> loaded;           // components restored
  std::vector<std::string> missing;          // registered, not in the file (skipped)
  std::vector<std::string> unexpected;       // in the file, not registered (skipped)
  std::vector<std::string> notes;            // e.g. what a legacy translation could not restore
  std::map<std::string, LoadResult> models;  // per module component: its key matching
  int64_t saved_world_size = 1;

  bool all_matched() const;
  std::string describe() const;  // a few lines: what was loaded, skipped and translated
};

class TrainingCheckpoint {
 public:
  TrainingCheckpoint() = default;
  TrainingCheckpoint(const TrainingCheckpoint&) = delete;
  TrainingCheckpoint& operator=(const TrainingCheckpoint&) = delete;

  // Adds a component under `name` (letters, digits and '_'; not "rng", "meta", "checkpoint").
  template <Stateful T>
  TrainingCheckpoint& add(std::string name, T& object);
  template <Stateful T>
  TrainingCheckpoint& add(std::string name, std::shared_ptr<T> object);
  // A counter (the global step, an epoch): saved as its value, loaded back into the variable.
  TrainingCheckpoint& add(std::string name, int64_t& counter);
  // An optimizer whose state is keyed by `model`'s parameter names (state_dict_by_name).
  TrainingCheckpoint& add_optimizer(std::string name, Optimizer& optimizer, const nn::Module& model);

  // Saved with every checkpoint, replaced by the file's on load. Strings, integers and doubles.
  std::map<std::string, MetadataValue> metadata;

  // The writing rank and how the ranks agree on a write's success: set by dist::sync_checkpoint.
  // `agree(ok)` returns whether every rank's `ok` is true (a collective).
  void set_writer(int rank, int world_size, std::function<bool(bool)> agree);

  // Every component's state, as the file would hold it (the writer's view).
  StateDict state_dict() const;
  // Writes the checkpoint on the writing rank; returns whether this rank wrote it.
  bool save(const std::string& path) const;
  // Checks on the writing rank that save(path) could write there (nn::check_checkpoint_destination),
  // and makes its refusal an error on every rank (a collective, like save). Call it before training.
  void check_destination(const std::string& path) const;
  // Loads `path` into every component (on every rank; each reads the file).
  CheckpointReport load(const std::string& path, CheckpointLoadOptions options = {});
  // The same from entries already read (a file's, or state_dict()'s).
  CheckpointReport load_state_dict(const StateDict& state, CheckpointLoadOptions options = {});

 private:
  struct Component {
    std::string name;
    std::function<StateDict()> save;
    // Loads the state; returns the key matching when the component reports one (modules).
    std::function<std::optional<LoadResult>(const StateDict&)> load;
    std::shared_ptr<void> owner;  // keeps a shared_ptr component alive
  };
  TrainingCheckpoint& add_component(Component component);
  CheckpointReport load_entries(const StateDict& state, CheckpointLoadOptions options, const std::string& path);

  std::vector<Component> components_;
  int writer_rank_ = -1;  // -1: random_rank()
  int world_size_ = 1;
  std::function<bool(bool)> agree_;
};

template <Stateful T>
TrainingCheckpoint& TrainingCheckpoint::add(std::string name, T& object) {
  return add_component({std::move(name), [&object] { return StateDict(object.state_dict()); },
                        [&object](const StateDict& state) -> std::optional<LoadResult> {
                          if constexpr (std::same_as<decltype(object.load_state_dict(state)), LoadResult>) {
                            return object.load_state_dict(state);
                          } else {
                            object.load_state_dict(state);
                            return std::nullopt;
                          }
                        },
                        nullptr});
}

template <Stateful T>
TrainingCheckpoint& TrainingCheckpoint::add(std::string name, std::shared_ptr<T> object) {
  RG_CHECK(object != nullptr, "TrainingCheckpoint::add", "component '", name, "' is null");
  add(name, *object);
  components_.back().owner = object;
  return *this;
}

// The metadata of the checkpoint at `path`, read without loading anything (e.g. the model's
// configuration, needed to build the model that load() then fills).
std::map<std::string, MetadataValue> checkpoint_metadata(const std::string& path);

}  // namespace ringgrad::optim
