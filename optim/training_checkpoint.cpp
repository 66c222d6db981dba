#include "optim/training_checkpoint.h"

#include <algorithm>
#include <cctype>
#include <set>

#include "core/ops.h"
#include "core/random_state.h"
#include "nn/checkpoint.h"

namespace ringgrad::optim {
namespace {

constexpr int64_t kFormat = 2;  // 1: the hand-assembled layout of before (no "checkpoint.format")
const std::set<std::string> kReserved = {"rng", "meta", "checkpoint"};

Tensor i64_tensor(int64_t v) {
  Tensor t = scalar_tensor(0, {.dtype = DType::i64});
  *t.data<int64_t>() = v;
  return t;
}

// The component a key belongs to: the text before its first '.'.
std::string component_of(const std::string& key) { return key.substr(0, key.find('.')); }

bool has_key(const StateDict& state, const std::string& key) {
  return std::any_of(state.begin(), state.end(), [&](const auto& e) { return e.first == key; });
}

Tensor metadata_tensor(const MetadataValue& value) {
  if (const auto* i = std::get_if<int64_t>(&value)) return i64_tensor(*i);
  if (const auto* d = std::get_if<double>(&value)) return scalar_tensor(*d, {.dtype = DType::f64});
  const std::string& s = std::get<std::string>(value);
  Tensor t = zeros({static_cast<int64_t>(s.size())}, {.dtype = DType::u8});
  std::copy(s.begin(), s.end(), t.data<uint8_t>());
  return t;
}

MetadataValue metadata_value(const std::string& key, const Tensor& t) {
  const Tensor host = t.to(Device::cpu()).clone();  // contiguous, on the host
  switch (host.dtype()) {
    case DType::u8: return std::string(host.data<uint8_t>(), host.data<uint8_t>() + host.numel());
    case DType::i64:
      RG_CHECK(host.numel() == 1, "TrainingCheckpoint", "metadata '", key, "' is not a scalar");
      return *host.data<int64_t>();
    case DType::f64:
      RG_CHECK(host.numel() == 1, "TrainingCheckpoint", "metadata '", key, "' is not a scalar");
      return host.item();
    default:
      RG_FAIL("TrainingCheckpoint", "metadata '", key, "' has dtype ", dtype_name(host.dtype()),
              "; metadata is u8 (a string), i64 or f64");
  }
}

// A file of the layout before "checkpoint.format": the examples assembled it by hand under
// "model.", "optimizer." (keyed by index, which load_state_dict_by_name still reads), "scaler.scale"
// / "scaler.growth", "rng.seed" / "rng.offset" and "progress.*". Rewritten into today's keys where
// there is one; `notes` says what has none.
StateDict translate_legacy(const StateDict& state, std::vector<std::string>& notes) {
  StateDict out;
  bool had_rng = false;
  for (const auto& [key, t] : state) {
    if (key == "scaler.growth") out.emplace_back("scaler.growth_tracker", t);
    else if (key == "rng.seed")
      out.emplace_back("rng.default.seed", i64_tensor(state_int({{key, t}}, key, "TrainingCheckpoint (legacy rng)"))),
          had_rng = true;
    else if (key == "rng.offset")
      out.emplace_back("rng.default.offset", i64_tensor(state_int({{key, t}}, key, "TrainingCheckpoint (legacy rng)")));
    else if (key == "progress.step") out.emplace_back("step.value", t);
    else out.emplace_back(key, t);
  }
  if (had_rng) {
    // The old layout kept only the default generator; the dropout stream is derived from its seed
    // again (offset 0), as manual_seed would leave it.
    out.emplace_back("rng.dropout.seed", i64_tensor(0));
    out.emplace_back("rng.dropout.offset", i64_tensor(0));
    out.emplace_back("rng.dropout.streams", i64_tensor(dropout_streams() == DropoutStreams::per_rank ? 0 : 1));
    out.emplace_back("rng.dropout.derived", i64_tensor(1));
    notes.push_back("legacy layout: the dropout stream restarts from its seed (the file has no dropout state)");
  }
  if (has_key(state, "progress.epoch") || has_key(state, "progress.step_in_epoch"))
    notes.push_back(
        "legacy layout: progress.epoch / progress.step_in_epoch are not a DataLoader's state; "
        "they stay under the component 'progress'");
  return out;
}

void check_name(const std::string& name) {
  RG_CHECK(!name.empty() && std::all_of(name.begin(), name.end(), [](char c) { return std::isalnum(c) || c == '_'; }),
           "TrainingCheckpoint::add", "component name '", name, "' must be letters, digits and '_'");
  RG_CHECK(!kReserved.count(name), "TrainingCheckpoint::add", "component name '", name,
           "' is reserved (rng, meta and checkpoint hold the checkpoint's own entries)");
}

}  // namespace

bool CheckpointReport::all_matched() const {
  if (!missing.empty() || !unexpected.empty()) return false;
  return std::all_of(models.begin(), models.end(), [](const auto& m) { return m.second.all_matched(); });
}

std::string CheckpointReport::describe() const {
  auto list = [](const std::vector<std::string>& names) {
    std::string s;
    for (size_t i = 0; i < names.size(); ++i) s += (i ? ", " : "") + names[i];
    return s;
  };
  std::string s = "checkpoint " + path + (legacy_layout ? " (legacy layout, translated)" : "") + ": loaded " +
                  list(loaded) + " (saved by " + std::to_string(saved_world_size) + " rank(s))";
  if (!missing.empty()) s += "\n  not in the file (left as they were): " + list(missing);
  if (!unexpected.empty()) s += "\n  in the file but not registered (skipped): " + list(unexpected);
  for (const auto& [name, result] : models)
    if (!result.all_matched()) s += "\n  " + name + ":" + result.describe();
  for (const std::string& note : notes) s += "\n  " + note;
  return s;
}

TrainingCheckpoint& TrainingCheckpoint::add_component(Component component) {
  check_name(component.name);
  RG_CHECK(std::none_of(components_.begin(), components_.end(),
                        [&](const Component& c) { return c.name == component.name; }),
           "TrainingCheckpoint::add", "component '", component.name, "' was added twice");
  components_.push_back(std::move(component));
  return *this;
}

TrainingCheckpoint& TrainingCheckpoint::add(std::string name, int64_t& counter) {
  return add_component({std::move(name),
                        [&counter] {
                          return StateDict{{"value", i64_tensor(counter)}};
                        },
                        [&counter](const StateDict& state) -> std::optional<LoadResult> {
                          counter = state_int(state, "value", "TrainingCheckpoint counter");
                          return std::nullopt;
                        },
                        nullptr});
}

TrainingCheckpoint& TrainingCheckpoint::add_optimizer(std::string name, Optimizer& optimizer, const nn::Module& model) {
  return add_component({std::move(name), [&optimizer, &model] { return state_dict_by_name(optimizer, model); },
                        [&optimizer, &model](const StateDict& state) -> std::optional<LoadResult> {
                          load_state_dict_by_name(optimizer, model, state);
                          return std::nullopt;
                        },
                        nullptr});
}

void TrainingCheckpoint::set_writer(int rank, int world_size, std::function<bool(bool)> agree) {
  RG_CHECK(rank >= 0 && rank < world_size, "TrainingCheckpoint::set_writer", "rank ", rank, " is not in [0, ",
           world_size, ")");
  writer_rank_ = rank;
  world_size_ = world_size;
  agree_ = std::move(agree);
}

StateDict TrainingCheckpoint::state_dict() const {
  StateDict out{{"checkpoint.format", i64_tensor(kFormat)}, {"checkpoint.world_size", i64_tensor(world_size_)}};
  for (const Component& c : components_)
    for (auto& [key, t] : c.save()) out.emplace_back(c.name + "." + key, t);
  for (auto& [key, t] : random_state_dict()) out.emplace_back("rng." + key, t);
  for (const auto& [key, value] : metadata) out.emplace_back("meta." + key, metadata_tensor(value));
  return out;
}

bool TrainingCheckpoint::save(const std::string& path) const {
  const int rank = writer_rank_ >= 0 ? writer_rank_ : random_rank();
  const bool writes = rank == 0;
  std::string error;
  if (writes) {
    try {
      nn::save_checkpoint(path, state_dict());
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  // Every rank learns whether rank 0's write succeeded (a collective: every rank calls save).
  const bool all_ok = agree_ ? agree_(error.empty()) : error.empty();
  if (!error.empty()) throw Error(error);
  RG_CHECK(all_ok, "TrainingCheckpoint::save", "rank 0 failed to write ", path, " (its error says why); rank ", rank,
           " stops too, so that no rank trains on past a checkpoint that does not exist");
  return writes;
}

void TrainingCheckpoint::check_destination(const std::string& path) const {
  const int rank = writer_rank_ >= 0 ? writer_rank_ : random_rank();
  std::string error;
  if (rank == 0) {
    try {
      nn::check_checkpoint_destination(path);
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  const bool all_ok = agree_ ? agree_(error.empty()) : error.empty();
  if (!error.empty()) throw Error(error);
  RG_CHECK(all_ok, "TrainingCheckpoint::check_destination", "rank 0 cannot write ", path,
           " (its error says why); rank ", rank, " stops too");
}

namespace {

// Runs read(); a refusal from any part of the loading -- a component, the format, the metadata --
// is given the file's name when its message lacks it.
template <class Read>
auto naming_file(const std::string& path, Read&& read) {
  try {
    return read();
  } catch (const Error& e) {
    const std::string what = e.what();
    if (what.find(path) != std::string::npos) throw;
    throw Error(str_cat(what, " (loading ", path, ")"));
  }
}

}  // namespace

CheckpointReport TrainingCheckpoint::load(const std::string& path, CheckpointLoadOptions options) {
  return naming_file(path, [&] { return load_entries(nn::load_checkpoint(path), options, path); });
}

CheckpointReport TrainingCheckpoint::load_state_dict(const StateDict& state, CheckpointLoadOptions options) {
  return load_entries(state, options, "(entries)");
}

CheckpointReport TrainingCheckpoint::load_entries(const StateDict& file_state, CheckpointLoadOptions options,
                                                  const std::string& path) {
  const char* who = "TrainingCheckpoint::load";
  CheckpointReport report;
  report.path = path;
  StateDict state = file_state;
  if (!has_key(state, "checkpoint.format")) {
    report.legacy_layout = true;
    state = translate_legacy(state, report.notes);
  } else {
    const int64_t format = state_int(state, "checkpoint.format", who);
    RG_CHECK(format == kFormat, who, "checkpoint format ", format, ", this build reads ", kFormat, " (and 1)");
    report.saved_world_size = state_int(state, "checkpoint.world_size", who);
  }

  // Which components the file holds, and which of them are registered.
  std::set<std::string> in_file;
  for (const auto& [key, t] : state) in_file.insert(component_of(key));
  std::set<std::string> registered;
  for (const Component& c : components_) {
    registered.insert(c.name);
    if (!in_file.count(c.name)) report.missing.push_back(c.name);
  }
  for (const std::string& name : in_file)
    if (!registered.count(name) && !kReserved.count(name)) report.unexpected.push_back(name);
  const bool has_rng = in_file.count("rng") > 0;
  if (options.random_state && !has_rng) report.missing.push_back("rng");
  if (options.strict && (!report.missing.empty() || !report.unexpected.empty())) {
    RG_FAIL(who,
            "the checkpoint does not match the components registered (strict = true; "
            "CheckpointLoadOptions{.strict = false} skips and reports them):\n",
            report.describe());
  }
  std::map<std::string, MetadataValue> loaded_metadata;
  for (const auto& [key, t] : with_prefix_removed(state, "meta.")) loaded_metadata[key] = metadata_value(key, t);

  // Load component by component; on a refusal, put back the ones already loaded.
  struct Undo {
    const Component* component;
    StateDict before;
  };
  std::vector<Undo> undo;
  const StateDict random_before = random_state_dict();
  try {
    for (const Component& c : components_) {
      if (!in_file.count(c.name)) continue;
      StateDict before;
      // A copy (save() aliases live tensors), kept in host memory: a GPU model's undo copy would
      // otherwise take as much GPU memory again as the model and its optimizer state, while the
      // file's tensors are loaded. Loading puts each value back on its tensor's device.
      for (auto& [key, t] : c.save()) {
        const Tensor host = t.to(Device::cpu());  // t itself when already on the host
        before.emplace_back(key, host.is_same(t) ? t.clone() : host);
      }
      std::optional<LoadResult> result = c.load(with_prefix_removed(state, c.name + "."));
      undo.push_back({&c, std::move(before)});
      if (result) report.models[c.name] = *result;
      report.loaded.push_back(c.name);
    }
    if (options.random_state && has_rng) {
      load_random_state_dict(with_prefix_removed(state, "rng."));
      report.loaded.push_back("rng");
    }
  } catch (...) {
    for (auto it = undo.rbegin(); it != undo.rend(); ++it) it->component->load(it->before);
    load_random_state_dict(random_before);
    throw;
  }
  metadata = std::move(loaded_metadata);
  return report;
}

std::map<std::string, MetadataValue> checkpoint_metadata(const std::string& path) {
  return naming_file(path, [&] {
    std::map<std::string, MetadataValue> out;
    for (const auto& [key, t] : with_prefix_removed(nn::load_checkpoint(path), "meta."))
      out[key] = metadata_value(key, t);
    return out;
  });
}

}  // namespace ringgrad::optim
