// Sharded checkpoints of dist::ZeroOptimizer: each rank writes its shard, rank 0 an index; a reader
// consolidates them into one full state, which any world size can load (resharding).
//
// Note [Sharded checkpoint files]: a save writes
//   <dir>/zero-<id>-shard-<r>-of-<N>.ckpt   on rank r: its pieces' state (shard_state_dict) and
//                                           "zero.save_id / .rank / .world_size / .stage"
//   <dir>/zero-<id>-index.ckpt              on rank 0, after every shard was written: "zero.save_id",
//                                           "zero.world_size", "shape.<name>" of every parameter in
//                                           the optimizer's order, "param_groups.<g>.lr / .weight_decay"
//   <dir>/zero-index.ckpt                   the same index again: the latest complete save
// <id> is new at each save (drawn on rank 0, broadcast). Every file is written atomically
// (nn/checkpoint.h) and the indexes last, so a save that fails on any rank, or a crash in the
// middle, leaves the previous checkpoint readable. The files of the save before the new one are
// kept too: a training checkpoint written after the shards (the examples record the save id in its
// metadata) that did not make it to disk still finds the shards it names. Older saves are removed.
// The folder must be one every rank sees (a shared filesystem): loading reads every shard.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <map>
#include <optional>
#include <random>

#include "core/error.h"
#include "core/ops.h"
#include "dist/consistency.h"
#include "dist/zero/zero_optimizer.h"
#include "nn/checkpoint.h"

namespace ringgrad::dist {

namespace {

namespace fs = std::filesystem;

constexpr double kFormat = 1;
const char* const kIndexName = "zero-index.ckpt";

std::string shard_path(const std::string& dir, int64_t id, int rank, int world) {
  return (fs::path(dir) / str_cat("zero-", id, "-shard-", rank, "-of-", world, ".ckpt")).string();
}

std::string index_path(const std::string& dir, std::optional<int64_t> id) {
  return (fs::path(dir) / (id ? str_cat("zero-", *id, "-index.ckpt") : std::string(kIndexName))).string();
}

// The save id of a file "zero-<id>-...", or -1 for any other name (the latest index among them).
int64_t save_id_of(const fs::path& file) {
  const std::string name = file.filename().string();
  if (name.rfind("zero-", 0) != 0) return -1;
  const size_t end = name.find('-', 5);
  if (end == std::string::npos || end == 5 || end - 5 > 16) return -1;
  const std::string digits = name.substr(5, end - 5);
  if (!std::all_of(digits.begin(), digits.end(), [](unsigned char c) { return std::isdigit(c); })) return -1;
  return std::stoll(digits);
}

// Every rank learns every rank's error ("" = fine); throws on all of them when any failed.
void agree_on_success(ProcessGroup& group, const std::string& error, const std::string& what) {
  const std::vector<std::string> errors = allgather_strings(group, error);
  std::string failed;
  for (size_t r = 0; r < errors.size(); ++r)
    if (!errors[r].empty()) failed += str_cat("\n  rank ", r, ": ", errors[r]);
  RG_CHECK(failed.empty(), "dist.ZeroOptimizer", what, " failed (seen by rank ", group.rank(), "/", group.size(), ")",
           failed);
}

// Sizes read from a file are trusted only up to this many elements (2^50: far beyond any model).
constexpr double kMaxElements = 1125899906842624.0;

bool is_count(double v, double most) { return std::isfinite(v) && v >= 0 && v <= most && v == std::floor(v); }

int64_t entry_int(const nn::StateDict& state, const std::string& key, const std::string& path) {
  for (const auto& [k, t] : state)
    if (k == key) {
      RG_CHECK(t.numel() == 1, "dist.consolidate_sharded", path, ": entry '", key, "' is not a single value");
      const double v = t.item();
      RG_CHECK(std::isfinite(v) && v >= 0 && v < 9007199254740992.0 && v == std::floor(v), "dist.consolidate_sharded",
               path, ": entry '", key, "' is ", v, ", not a count");
      return static_cast<int64_t>(v);
    }
  RG_FAIL("dist.consolidate_sharded", path, ": entry '", key, "' is missing; not a sharded optimizer checkpoint");
}

}  // namespace

nn::StateDict ZeroOptimizer::shard_state_dict() const {
  nn::StateDict out;
  for (const ShardPiece& piece : piece_of_)
    out.emplace_back(str_cat("piece.", names_[piece.param], ".range"),
                     from_vector(std::vector<int64_t>{piece.param_offset, piece.numel}, {2}));
  for (const auto& [key, t] : inner_->state_dict()) {  // "<j>.<what>" of piece j
    const size_t dot = key.find('.');
    const size_t j = std::stoul(key.substr(0, dot));
    out.emplace_back(str_cat("piece.", names_[piece_of_.at(j).param], key.substr(dot)), t);
  }
  return out;
}

int64_t ZeroOptimizer::save_sharded(const std::string& dir) const {
  const int N = group_.size(), rank = group_.rank();
  // Every step below catches what it raises and the ranks agree on it, so that a failure on one
  // rank is an error on all of them rather than a rank leaving while the others wait.
  std::string error;
  try {
    RG_CHECK(!dir.empty(), "dist.ZeroOptimizer.save_sharded", "the folder name is empty");
    std::error_code ec;
    fs::create_directories(dir, ec);
    RG_CHECK(fs::is_directory(dir, ec), "dist.ZeroOptimizer.save_sharded", "cannot create the folder '", dir, "'",
             ec ? ": " + ec.message() : "");
  } catch (const std::exception& e) {
    error = e.what();
  }
  agree_on_success(group_, error, str_cat("creating the folder '", dir, "'"));

  // A new id per save, so that new shards never overwrite the ones an index names.
  Tensor id_tensor = full({1}, 0.0, {.dtype = DType::i64});
  if (rank == 0) {
    std::random_device device;
    const uint64_t bits = (uint64_t{device()} << 32 | device()) & ((uint64_t{1} << 52) - 1);
    id_tensor = full({1}, static_cast<double>(bits), {.dtype = DType::i64});
  }
  if (N > 1) group_.broadcast(id_tensor, 0)->wait();
  const int64_t id = static_cast<int64_t>(id_tensor.item());

  const std::string mine = shard_path(dir, id, rank, N);
  try {
    nn::StateDict shard = shard_state_dict();
    shard.emplace_back("zero.save_id", scalar_tensor(static_cast<double>(id), {.dtype = DType::f64}));
    shard.emplace_back("zero.rank", scalar_tensor(rank, {.dtype = DType::f64}));
    shard.emplace_back("zero.world_size", scalar_tensor(N, {.dtype = DType::f64}));
    shard.emplace_back("zero.stage", scalar_tensor(options_.stage, {.dtype = DType::f64}));
    nn::save_checkpoint(mine, shard);
  } catch (const std::exception& e) {
    error = e.what();
  }
  try {
    agree_on_success(group_, error, "writing the shards");
  } catch (const Error&) {
    std::error_code ec;
    fs::remove(mine, ec);  // a shard of a save that did not complete
    throw;
  }

  if (rank == 0) {
    try {
      nn::StateDict index;
      index.emplace_back("zero.format", scalar_tensor(kFormat, {.dtype = DType::f64}));
      index.emplace_back("zero.save_id", scalar_tensor(static_cast<double>(id), {.dtype = DType::f64}));
      index.emplace_back("zero.world_size", scalar_tensor(N, {.dtype = DType::f64}));
      index.emplace_back("zero.stage", scalar_tensor(options_.stage, {.dtype = DType::f64}));
      for (size_t i = 0; i < params_.size(); ++i) {
        const Shape& shape = params_[i].shape();
        index.emplace_back("shape." + names_[i], from_vector(std::vector<int64_t>(shape.begin(), shape.end()),
                                                             {static_cast<int64_t>(shape.size())}));
      }
      for (size_t g = 0; g < groups_.size(); ++g) {
        index.emplace_back(str_cat("param_groups.", g, ".lr"), scalar_tensor(groups_[g].lr, {.dtype = DType::f64}));
        index.emplace_back(str_cat("param_groups.", g, ".weight_decay"),
                           scalar_tensor(groups_[g].weight_decay, {.dtype = DType::f64}));
      }
      // The save the latest index names now stays; older ones go once the new index is in place.
      const std::string latest = index_path(dir, std::nullopt);
      std::error_code ec;
      int64_t previous = -1;
      if (fs::exists(latest, ec)) previous = entry_int(nn::load_checkpoint(latest), "zero.save_id", latest);
      nn::save_checkpoint(index_path(dir, id), index);
      nn::save_checkpoint(latest, index);
      std::vector<fs::path> stale;
      for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
        const int64_t of = save_id_of(it->path());
        if (of >= 0 && of != id && of != previous) stale.push_back(it->path());
      }
      for (const fs::path& file : stale) fs::remove(file, ec);
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  try {
    agree_on_success(group_, error, "writing the index");
  } catch (const Error&) {
    std::error_code ec;
    fs::remove(mine, ec);
    throw;
  }
  return id;
}

void ZeroOptimizer::load_sharded(const std::string& dir, std::optional<int64_t> save_id) {
  // Collective: a rank whose load failed must not train on while the others stop, so the ranks
  // agree, and a rank that had loaded puts its state back.
  const nn::StateDict previous = inner_->state_dict();  // load replaces these tensors, never writes them
  const std::vector<optim::ParamGroup> previous_groups = groups_;
  std::string error;
  try {
    optim::load_state_dict_by_name(*this, ddp_.module(), consolidate_sharded(dir, save_id));
  } catch (const std::exception& e) {
    error = e.what();
  }
  try {
    agree_on_success(group_, error, str_cat("loading the sharded optimizer state from '", dir, "'"));
  } catch (const Error&) {
    if (error.empty()) {
      inner_->load_state_dict(previous);
      groups_ = previous_groups;
    }
    throw;
  }
}

namespace {

// consolidate_sharded's steps: read the index, read every shard's pieces, then per parameter check
// that its pieces tile it and join each state tensor's pieces into the whole.

const char* const kConsolidate = "dist.consolidate_sharded";

// What the index of one save says (Note [Sharded checkpoint files]).
struct ShardedIndex {
  std::string file;
  int64_t id = 0, world = 0;
  std::vector<std::pair<std::string, Shape>> params;  // in the optimizer's order
  nn::StateDict param_groups;                         // "param_groups.<g>.<what>"
};

ShardedIndex read_index(const std::string& dir, std::optional<int64_t> save_id) {
  const char* who = kConsolidate;
  ShardedIndex index;
  index.file = index_path(dir, save_id);
  const std::string& file = index.file;
  std::error_code ec;
  RG_CHECK(fs::is_directory(dir, ec), who, "'", dir, "' is not a folder holding a sharded optimizer checkpoint");
  RG_CHECK(fs::exists(file, ec), who, "'", file, "' is missing: '", dir, "' holds no complete ",
           save_id ? str_cat("save ", *save_id, " of a ") : std::string(),
           "sharded optimizer checkpoint (the index is written last)");
  const nn::StateDict entries = nn::load_checkpoint(file);
  RG_CHECK(entry_int(entries, "zero.format", file) == static_cast<int64_t>(kFormat), who, file, ": unknown format ",
           entry_int(entries, "zero.format", file));
  index.id = entry_int(entries, "zero.save_id", file);
  RG_CHECK(!save_id || index.id == *save_id, who, file, " describes save ", index.id, ", not ", save_id.value_or(-1));
  index.world = entry_int(entries, "zero.world_size", file);
  RG_CHECK(index.world >= 1 && index.world <= (1 << 20), who, file, ": world size ", index.world, " is out of range");
  for (const auto& [key, t] : entries) {
    if (key.rfind("shape.", 0) == 0) {
      Shape shape;
      double numel = 1;
      for (double d : t.to_vector()) {
        RG_CHECK(is_count(d, kMaxElements), who, file, ": entry '", key, "' holds the dimension ", d);
        shape.push_back(static_cast<int64_t>(d));
        numel *= d;
      }
      RG_CHECK(t.dim() == 1 && numel <= kMaxElements, who, file, ": entry '", key, "' is not a shape of at most ",
               kMaxElements, " elements");
      index.params.emplace_back(key.substr(6), shape);
    } else if (key.rfind("param_groups.", 0) == 0) {
      index.param_groups.emplace_back(key, t);
    }
  }
  return index;
}

// One piece of a parameter, or of one of its state tensors, as a shard holds it.
struct Part {
  int64_t offset, numel;
  Tensor value;      // undefined for a parameter's range
  std::string file;  // the shard it came from
};

// Every shard's pieces, by parameter name.
struct ShardPieces {
  std::map<std::string, std::vector<Part>> ranges;                        // name -> its pieces' ranges
  std::map<std::string, std::map<std::string, std::vector<Part>>> state;  // name -> what -> pieces
};

void read_shard(const std::string& path, const ShardedIndex& index, int64_t rank, ShardPieces& pieces) {
  const char* who = kConsolidate;
  std::error_code ec;
  RG_CHECK(fs::exists(path, ec), who, "shard '", path, "' named by '", index.file, "' is missing");
  const nn::StateDict shard = nn::load_checkpoint(path);
  RG_CHECK(entry_int(shard, "zero.save_id", path) == index.id && entry_int(shard, "zero.rank", path) == rank &&
               entry_int(shard, "zero.world_size", path) == index.world,
           who, path, ": the shard does not belong to the save that '", index.file, "' describes (save ", index.id,
           ", rank ", rank, " of ", index.world, ")");
  std::map<std::string, int64_t> offset_of;
  for (const auto& [key, t] : shard) {
    if (key.rfind("piece.", 0) != 0 || key.size() < 13 || key.compare(key.size() - 6, 6, ".range") != 0) continue;
    const std::string name = key.substr(6, key.size() - 12);
    const std::vector<double> range = t.to_vector();
    RG_CHECK(range.size() == 2 && is_count(range[0], kMaxElements) && is_count(range[1], kMaxElements) && range[1] > 0,
             who, path, ": entry '", key, "' is not [offset, numel]");
    offset_of[name] = static_cast<int64_t>(range[0]);
    pieces.ranges[name].push_back({static_cast<int64_t>(range[0]), static_cast<int64_t>(range[1]), Tensor(), path});
  }
  for (const auto& [key, t] : shard) {
    if (key.rfind("piece.", 0) != 0) continue;
    const size_t last = key.rfind('.');
    RG_CHECK(last > 6, who, path, ": entry '", key, "' is not 'piece.<name>.<what>'");
    const std::string name = key.substr(6, last - 6), what = key.substr(last + 1);
    if (what == "range") continue;
    auto it = offset_of.find(name);
    RG_CHECK(it != offset_of.end(), who, path, ": entry '", key, "' has no 'piece.", name, ".range'");
    pieces.state[name][what].push_back({it->second, t.numel(), t, path});
  }
}

bool by_offset(const Part& a, const Part& b) { return a.offset < b.offset; }

// A parameter's pieces, sorted, after checking that they tile its numel elements exactly.
std::vector<Part> tiling(std::vector<Part> parts, const std::string& name, int64_t numel, const std::string& dir) {
  const char* who = kConsolidate;
  std::sort(parts.begin(), parts.end(), by_offset);
  int64_t covered = 0;
  for (const Part& p : parts) {
    RG_CHECK(p.offset == covered, who, p.file, ": the pieces of '", name, "' do not tile it: a piece starts at ",
             p.offset, " where ", covered, " was expected");
    covered += p.numel;
    RG_CHECK(covered <= numel, who, p.file, ": the pieces of '", name, "' run past its ", numel, " elements");
  }
  RG_CHECK(covered == numel, who, "'", dir, "': the pieces of '", name, "' cover ", covered, " of its ", numel,
           " elements");
  return parts;
}

// One state tensor `what` of parameter `name` from its pieces (on the tiling `parts`): a scalar
// every piece holds alike (Adam's step), or the pieces joined into the parameter's shape.
Tensor joined(std::vector<Part> pieces, const std::vector<Part>& parts, const std::string& name,
              const std::string& what, const Shape& shape, const std::string& dir) {
  const char* who = kConsolidate;
  std::sort(pieces.begin(), pieces.end(), by_offset);
  RG_CHECK(pieces.size() == parts.size(), who, "'", dir, "': ", pieces.size(), " of the ", parts.size(), " pieces of '",
           name, "' hold '", what, "'");
  if (pieces[0].value.dim() == 0) {  // a scalar per piece (Adam's step): the same in every piece
    for (const Part& p : pieces)
      RG_CHECK(p.value.dim() == 0 && p.value.item() == pieces[0].value.item(), who, p.file, ": '", name, ".", what,
               "' is ", p.value.item(), " here, ", pieces[0].value.item(), " in ", pieces[0].file);
    return pieces[0].value;
  }
  // Checked before the whole is allocated: its size is the index's word, the pieces' the files'.
  for (size_t k = 0; k < pieces.size(); ++k)
    RG_CHECK(pieces[k].offset == parts[k].offset && pieces[k].numel == parts[k].numel &&
                 pieces[k].value.dtype() == pieces[0].value.dtype(),
             who, pieces[k].file, ": '", name, ".", what, "' at offset ", pieces[k].offset, " holds ",
             pieces[k].value.numel(), " ", dtype_name(pieces[k].value.dtype()), " elements, its piece ", parts[k].numel,
             " ", dtype_name(pieces[0].value.dtype()));
  Tensor whole = empty({shape_numel(shape)}, {.dtype = pieces[0].value.dtype()});
  for (const Part& piece : pieces)
    whole.narrow(0, piece.offset, piece.numel).copy_(piece.value.contiguous().view({-1}));
  return whole.view(shape);
}

}  // namespace

nn::StateDict consolidate_sharded(const std::string& dir, std::optional<int64_t> save_id) {
  const ShardedIndex index = read_index(dir, save_id);
  ShardPieces pieces;
  for (int64_t r = 0; r < index.world; ++r)
    read_shard(shard_path(dir, index.id, static_cast<int>(r), static_cast<int>(index.world)), index, r, pieces);
  nn::StateDict out = index.param_groups;
  for (const auto& [name, shape] : index.params) {
    const std::vector<Part> parts = tiling(pieces.ranges[name], name, shape_numel(shape), dir);
    for (auto& [what, state_pieces] : pieces.state[name])
      out.emplace_back(name + "." + what, joined(std::move(state_pieces), parts, name, what, shape, dir));
  }
  return out;
}

}  // namespace ringgrad::dist
