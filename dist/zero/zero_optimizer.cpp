#include "dist/zero/zero_optimizer.h"

#include <cctype>
#include <climits>
#include <cmath>
#include <map>
#include <set>

#include "autograd/activation_checkpoint.h"
#include "autograd/engine.h"
#include "autograd/node.h"
#include "core/error.h"
#include "core/ops.h"
#include "nn/containers.h"

namespace ringgrad::dist {

namespace {

// The model's name of each parameter, checked: trainable parameters of the model, each once.
std::vector<std::string> names_in_model(const std::vector<Tensor>& params, const nn::Module& model) {
  const auto named = model.named_parameters();
  std::vector<std::string> names;
  std::set<std::string> seen;
  for (size_t i = 0; i < params.size(); ++i) {
    auto it = std::find_if(named.begin(), named.end(), [&](const auto& e) { return e.second.is_same(params[i]); });
    RG_CHECK(it != named.end(), "dist.ZeroOptimizer", "parameter ", i, " (", params[i].desc(),
             ") is not a parameter of the DDP model ", model.type_name());
    RG_CHECK(params[i].requires_grad(), "dist.ZeroOptimizer", "parameter '", it->first,
             "' does not require a gradient: DDP leaves it out of its buckets, so no rank would step it");
    RG_CHECK(seen.insert(it->first).second, "dist.ZeroOptimizer", "parameter '", it->first, "' is listed twice");
    names.push_back(it->first);
  }
  return names;
}

}  // namespace

ZeroOptimizer::ZeroOptimizer(DistributedDataParallel& ddp, std::vector<optim::ParamGroup> groups, MakeOptimizer make,
                             ZeroOptions options)
    : Optimizer(std::move(groups)), ddp_(ddp), group_(ddp.group()), options_(options), make_(std::move(make)) {
  RG_CHECK(options.stage >= 1 && options.stage <= 3, "dist.ZeroOptimizer",
           "stage must be 1 (optimizer state), 2 (and gradients) or 3 (and parameters), got ", options.stage,
           ". Stage 0 is plain DDP with an ordinary optimizer");
  RG_CHECK(options.units.empty() || options.stage == 3, "dist.ZeroOptimizer",
           "ZeroOptions::units names the modules stage 3 gathers one at a time; stage ", options.stage,
           " keeps every parameter whole on every rank");
  RG_CHECK(std::isfinite(options.staging_mb) && options.staging_mb > 0 && options.staging_mb <= (1 << 20),
           "dist.ZeroOptimizer", "staging_mb must be a positive number of MiB up to 1048576, got ", options.staging_mb);
  RG_CHECK(make_ != nullptr, "dist.ZeroOptimizer", "no function to build the sharded optimizer");
  RG_CHECK(!options.reduce_scatter_wire || options.stage >= 2, "dist.ZeroOptimizer",
           "ZeroOptions::reduce_scatter_wire (",
           wire_format_name(options.reduce_scatter_wire.value_or(WireFormat::bf16)),
           ") sets the wire of stages 2 and 3's reduce-scatter; stage 1 reduces with DDP's AllReduce: give DDP a comm "
           "hook (dist/ddp/comm_hook.h) instead");
  RG_CHECK(options.scale_block > 0 && options.scale_block <= INT_MAX, "dist.ZeroOptimizer",
           "scale_block must be in [1, INT_MAX], got ", options.scale_block);
  params_ = parameters();
  names_ = names_in_model(params_, ddp.module());
  const int N = group_.size();

  // Step 1: buckets padded to N m elements, their layout fixed. From here on a failure must give
  // the DDP model back, or no other optimizer could shard it.
  // Stage 2 keeps only this rank's reduced block, so the full-size buffers are released between
  // steps (Note [Gradient buffers released after the reduction], dist/ddp/reducer.h).
  // Stage 3: one bucket per unit (Note [Units of stage 3] in dist/zero/gathered_units.h).
  const std::vector<std::vector<std::string>> units = options.stage == 3 ? choose_units() : decltype(units){};
  ddp.shard_buckets(N, this, /*release_gradients=*/options.stage >= 2, units);
  try {
    build_shards();
  } catch (...) {
    ddp.release_shard_owner(this);
    throw;
  }
}

std::vector<std::vector<std::string>> ZeroOptimizer::choose_units() {
  nn::Module& model = ddp_.module();
  const std::vector<std::pair<std::string, nn::Module*>> modules = model.named_modules();  // forward order
  auto inside = [](const std::string& path, const std::string& unit) {
    return unit.empty() || path.rfind(unit + ".", 0) == 0;
  };
  std::vector<std::pair<std::string, nn::Module*>> chosen;
  if (!options_.units.empty()) {
    for (const auto& [path, module] : modules)
      if (std::find(options_.units.begin(), options_.units.end(), path) != options_.units.end())
        chosen.emplace_back(path, module);
    for (const std::string& want : options_.units) {
      RG_CHECK(!want.empty() &&
                   std::any_of(chosen.begin(), chosen.end(), [&](const auto& c) { return c.first == want; }),
               "dist.ZeroOptimizer", "ZeroOptions::units names '", want, "', which is not a module of the model ",
               model.type_name(), want.empty() ? " (the root is always a unit of its own)" : "");
    }
    for (size_t i = 0; i < chosen.size(); ++i)
      for (size_t j = 0; j < chosen.size(); ++j)
        RG_CHECK(i == j || !inside(chosen[i].first, chosen[j].first), "dist.ZeroOptimizer", "ZeroOptions::units: '",
                 chosen[i].first, "' lies inside '", chosen[j].first, "'; units cannot nest");
  } else {
    // Every child of a ModuleList (Sequential included) holding trainable parameters, outermost first.
    for (const auto& entry : modules) {
      const std::string& path = entry.first;  // a plain reference: clang 14 cannot capture a binding
      if (dynamic_cast<nn::ModuleList*>(entry.second) == nullptr) continue;
      if (std::any_of(chosen.begin(), chosen.end(), [&](const auto& c) { return inside(path, c.first); })) continue;
      for (const auto& [child_path, child] : modules) {
        const std::string prefix = path.empty() ? "" : path + ".";
        if (child_path.rfind(prefix, 0) != 0 || child_path == path) continue;
        if (child_path.find('.', prefix.size()) != std::string::npos) continue;  // a direct child only
        const auto params = child->named_parameters();
        if (std::any_of(params.begin(), params.end(), [](const auto& p) { return p.second.requires_grad(); }))
          chosen.emplace_back(child_path, child);
      }
    }
  }
  // Each parameter of the optimizer to the first unit holding it; a tensor in two units is refused.
  std::map<const TensorImpl*, std::string> name_of;
  for (size_t i = 0; i < params_.size(); ++i) name_of[params_[i].impl()] = names_[i];
  std::map<const TensorImpl*, std::string> unit_of;
  std::vector<std::vector<std::string>> members(chosen.size());
  for (size_t k = 0; k < chosen.size(); ++k)
    for (const auto& [local, t] : chosen[k].second->named_parameters()) {
      auto it = name_of.find(t.impl());
      if (it == name_of.end()) continue;  // frozen, or not this optimizer's
      auto [where, fresh] = unit_of.emplace(t.impl(), chosen[k].first);
      RG_CHECK(fresh, "dist.ZeroOptimizer", "parameter '", it->second, "' is used by unit '", where->second,
               "' and by unit '", chosen[k].first,
               "': a tensor shared between units (tied weights) must lie in one unit, or in none (the root); "
               "name the units with ZeroOptions::units");
      members[k].push_back(it->second);
    }
  std::vector<std::string> root;
  for (size_t i = 0; i < params_.size(); ++i)
    if (!unit_of.count(params_[i].impl())) root.push_back(names_[i]);
  // The units' order: forward. The buckets': backward (the last unit's gradients are ready first),
  // the root last (its parameters -- the embeddings -- finish last).
  if (!root.empty()) {
    unit_paths_.push_back("(root)");
    unit_modules_.push_back(nullptr);
  }
  std::vector<std::vector<std::string>> buckets;
  for (size_t k = 0; k < chosen.size(); ++k) {
    if (members[k].empty()) continue;
    unit_paths_.push_back(chosen[k].first);
    unit_modules_.push_back(chosen[k].second);
    buckets.insert(buckets.begin(), members[k]);
  }
  if (!root.empty()) buckets.push_back(root);
  return buckets;
}

void ZeroOptimizer::build_shards() {
  const int N = group_.size(), rank = group_.rank();
  std::map<std::string, std::pair<int, int64_t>> index_of;
  for (size_t i = 0; i < params_.size(); ++i) index_of[names_[i]] = {static_cast<int>(i), params_[i].numel()};
  const std::vector<BucketInfo> buckets = ddp_.buckets();
  layout_ = ShardLayout(buckets, index_of, N);
  size_t in_buckets = 0;
  for (const BucketInfo& b : buckets) in_buckets += b.parameter_names.size();
  RG_CHECK(in_buckets == params_.size(), "dist.ZeroOptimizer", "rank ", rank, "/", N, ": the optimizer holds ",
           params_.size(), " parameters but the DDP model's buckets ", in_buckets,
           ": it must hold exactly the trainable ones");
  for (const BucketInfo& b : buckets) {
    const Tensor& first = params_[index_of.at(b.parameter_names.at(0)).first];
    bucket_type_.emplace_back(b.dtype, first.device());
  }
  // Before any view of a parameter is taken: the pieces below are views of wherever they live.
  if (options_.stage == 3) shard_parameters();
  else place_parameters_in_shared_memory();

  // This rank's pieces, grouped as their parameters are.
  std::map<const TensorImpl*, size_t> group_of;
  for (size_t g = 0; g < groups_.size(); ++g)
    for (const Tensor& p : groups_[g].params) group_of[p.impl()] = g;
  std::vector<optim::ParamGroup> piece_groups;
  for (const optim::ParamGroup& g : groups_) piece_groups.push_back({{}, g.lr, g.weight_decay});
  // The inner optimizer lists its parameters group by group: pieces_ follows that order.
  for (size_t g = 0; g < groups_.size(); ++g)
    for (const ShardPiece& piece : layout_.pieces(rank)) {
      if (group_of.at(params_[piece.param].impl()) != g) continue;
      // A piece that is a whole parameter keeps its shape, so that its state is shaped as a plain
      // optimizer's (a 0-dim parameter's moments are 0-dim, not (1)).
      if (units_) {  // stage 3: views of the persistent shard, which the step updates in place
        const Tensor slice =
            units_->unit(units_->unit_of_bucket(piece.bucket)).shard.narrow(0, piece.block_offset, piece.numel);
        pieces_.push_back(whole(piece) ? slice.view(params_[piece.param].shape()) : slice);
      } else {
        pieces_.push_back(whole(piece) ? params_[piece.param].detach() : flat(piece));
      }
      piece_of_.push_back(piece);
      piece_groups[g].params.push_back(pieces_.back());
    }
  const size_t num_groups = piece_groups.size();
  inner_ = make_(std::move(piece_groups));
  RG_CHECK(inner_ != nullptr && inner_->parameters().size() == pieces_.size() &&
               inner_->param_groups().size() == num_groups,
           "dist.ZeroOptimizer", "the sharded optimizer must be built over exactly the parameter groups it is given");

  if (options_.stage >= 2) {
    // On one machine each bucket's reduce-scatter goes through one shared staging buffer: the
    // largest bucket's size, at most staging_mb, and room for one element of every block of the
    // widest dtype (Note [Reduce-scatter through a shared buffer], dist/shm/reduction_buffer.h).
    int64_t largest = 0, widest = 0;
    bool in_shared_memory = true;
    for (int b = 0; b < layout_.num_buckets(); ++b) {
      const auto element = static_cast<int64_t>(dtype_size(bucket_type_[b].first));
      largest = std::max(largest, N * layout_.block_numel(b) * element);
      widest = std::max(widest, N * element);
      in_shared_memory = in_shared_memory && group_.offers_shared_memory(bucket_type_[b].second);
      const DType dt = bucket_type_[b].first;
      RG_CHECK(!options_.reduce_scatter_wire ||
                   (bucket_type_[b].second.is_cpu() && (dt == DType::f32 || dt == DType::f16 || dt == DType::bf16)),
               "dist.ZeroOptimizer", "rank ", rank, "/", N, ": ZeroOptions::reduce_scatter_wire ",
               wire_format_name(*options_.reduce_scatter_wire),
               " reduces f32, f16 or bf16 CPU buckets only (the low-precision ring), but bucket ", b, " is ",
               dtype_name(dt), " on ", bucket_type_[b].second.str());
    }
    // A low-precision wire travels as messages through the ring, never through the shared buffer.
    in_shared_memory = in_shared_memory && !options_.reduce_scatter_wire;
    const auto cap = static_cast<int64_t>(options_.staging_mb * (1 << 20));
    const int64_t staging = std::max(std::min(largest, cap), widest);
    if (N > 1) {
      // The reservation is collective with the same bytes everywhere: a staging_mb that differs
      // between ranks fails every rank here, rather than mismatching the reservation's collectives.
      // The reduce-scatter's wire travels along: a rank on another wire would reduce with another
      // collective, and hang or mix formats.
      const int64_t wire =
          options_.reduce_scatter_wire
              ? (static_cast<int64_t>(*options_.reduce_scatter_wire) + 1) * (int64_t{1} << 31) + options_.scale_block
              : 0;
      Tensor range = from_vector(std::vector<int64_t>{staging, -staging, wire, -wire}, {4});  // max and -min
      group_.allreduce(range, ReduceOp::max)->wait();
      const std::vector<double> r = range.to_vector();  // exact: staging, wire < 2^53
      RG_CHECK(r[2] == -r[3], "dist.ZeroOptimizer", "rank ", rank, "/", N,
               ": ZeroOptions::reduce_scatter_wire and scale_block differ between ranks (here ",
               options_.reduce_scatter_wire ? wire_format_name(*options_.reduce_scatter_wire) : "none", ", ",
               options_.scale_block, "): every rank must reduce-scatter with the same wire");
      RG_CHECK(r[0] == -r[1], "dist.ZeroOptimizer", "rank ", rank, "/", N, ": the stage-2 staging is ", staging,
               " bytes here but ", static_cast<int64_t>(r[0] == static_cast<double>(staging) ? -r[1] : r[0]),
               " on another rank: every rank must pass the same ZeroOptions::staging_mb");
      if (in_shared_memory && group_.reserve_reduce_scatter_staging(staging))
        staging_bytes_ = static_cast<size_t>(staging);
    }
    reduced_ = std::make_shared<ReducedGradients>();
    for (int b = 0; b < layout_.num_buckets(); ++b) {
      reduced_->blocks.push_back(
          zeros({layout_.block_numel(b)}, {.dtype = bucket_type_[b].first, .device = bucket_type_[b].second}));
      reduced_->holds.push_back(false);
    }
    // Step 2, stage 2: each bucket's reduction is a reduce-scatter into this rank's block, or added
    // to it when the block holds an earlier backward's gradient of the same step. The hook shares
    // the blocks, not `this`; the destructor puts DDP's own hook back.
    // Stage 3: once a unit's bucket is reduced no node reads its parameters again in this backward,
    // so they are released -- if the count of its gradients did not release them already (Note
    // [Gather, use, release] in dist/zero/gathered_units.h).
    std::optional<LowPrecisionAllreduce> low_precision;
    if (options_.reduce_scatter_wire)
      low_precision = LowPrecisionAllreduce{.wire = *options_.reduce_scatter_wire,
                                            .scale_block = options_.scale_block,
                                            .error_feedback = Tensor()};
    ddp_.set_comm_hook(
        [reduced = reduced_, units = units_, low_precision](ProcessGroup& group, GradBucket& bucket) -> HookWork {
          if (units) units->release(units->unit_of_bucket(bucket.index));
          if (reduced->consumed) reduced->clear();  // Note [A step consumes the reduced gradient]
          Tensor block = reduced->blocks.at(bucket.index);
          const bool add = reduced->holds.at(bucket.index);
          reduced->holds[bucket.index] = true;
          const Tensor out = add ? empty_like(block) : block;
          std::function<void()> then;
          if (add) then = [block, out]() mutable { block.add_(out); };
          // Note [Average, not sum] in dist/ddp/ddp.h. The low-precision ring adds in f32 and divides
          // once, whatever the bucket's dtype.
          if (low_precision)
            return {group.reduce_scatter_low_precision(out, bucket.buffer, ReduceOp::avg, *low_precision), then};
          // Note [Averaging half precision] in dist/ddp/comm_hook.h. A pre-scaled copy is reduced: a
          // reduce-scatter leaves its input as it was.
          const Averaging averaging = average_over(group, bucket.buffer.dtype());
          if (averaging.pre_scale != 1) {
            Tensor scaled = bucket.buffer * averaging.pre_scale;
            return {group.reduce_scatter(out, scaled, averaging.op), [scaled, then] {
                      if (then) then();
                    }};
          }
          return {group.reduce_scatter(out, bucket.buffer, averaging.op), then};
        });
  }
  if (options_.stage == 3) install_unit_hooks();  // what gathers each unit, and when
}

// Stage 3: the parameters go into one buffer per unit, laid out as its bucket (Note [Gather, use,
// release] in dist/zero/gathered_units.h); this rank's block is copied out as the unit's shard.
void ZeroOptimizer::shard_parameters() {
  const int N = group_.size(), rank = group_.rank();
  for (size_t i = 0; i < params_.size(); ++i)
    RG_CHECK(params_[i].is_contiguous(), "dist.ZeroOptimizer", "rank ", rank, "/", N, ": stage 3 lays parameter '",
             names_[i], "' (", params_[i].desc(), ") out in its unit's flat buffer, so it must be contiguous");
  const auto places = layout_.places(static_cast<int>(params_.size()));  // {bucket, first element}
  const std::vector<BucketInfo> buckets = ddp_.buckets();
  std::vector<GatheredUnits::Unit> units(unit_paths_.size());
  const bool has_root = !unit_modules_.empty() && unit_modules_[0] == nullptr;
  const int K = static_cast<int>(unit_paths_.size()) - (has_root ? 1 : 0);  // units other than the root
  NoGradGuard no_grad;
  for (size_t u = 0; u < units.size(); ++u) {
    GatheredUnits::Unit& unit = units[u];
    unit.name = unit_paths_[u];
    // Bucket order is backward order: the last unit first, the root last (choose_units).
    unit.bucket = has_root && u == 0 ? K : K - 1 - static_cast<int>(u - (has_root ? 1 : 0));
    const int b = unit.bucket;
    const int64_t m = layout_.block_numel(b);
    const TensorOptions type{.dtype = bucket_type_[b].first, .device = bucket_type_[b].second};
    unit.full = zeros({N * m}, type);  // the padding stays zero: no parameter covers it
    std::string names;
    const std::vector<std::string>& in_bucket = buckets.at(b).parameter_names;
    for (size_t k = 0; k < in_bucket.size() && k < 4; ++k) names += str_cat(k ? ", " : "", in_bucket[k]);
    if (in_bucket.size() > 4) names += str_cat(" and ", in_bucket.size() - 4, " more");
    unit.released_why = str_cat("under ZeRO stage 3 rank ", rank, "/", N, " keeps only its 1/", N, " of unit '",
                                unit.name, "' (", names,
                                ") outside the unit's forward and backward. Read or write the parameters inside "
                                "ZeroOptimizer::gathered_parameters(), and call modules as (*module)(x), not "
                                "module->forward(x), so that their forward hooks gather them");
    for (size_t i = 0; i < params_.size(); ++i) {
      if (places[i].first != b) continue;
      Tensor& p = params_[i];
      p.move_into(unit.full.narrow(0, places[i].second, p.numel()).view(p.shape()));
      ++unit.num_params;
    }
    unit.shard = unit.full.narrow(0, rank * m, m).clone();
  }
  // Released once the optimizer is built (install_unit_hooks): a failure before leaves the model usable.
  units_ = std::make_shared<GatheredUnits>(group_, std::move(units), has_root);
}

// Note [Gather, use, release] in dist/zero/gathered_units.h: the hooks that gather each unit.
void ZeroOptimizer::install_unit_hooks() {
  std::weak_ptr<GatheredUnits> weak = units_;
  // The identity node on a unit's output: its backward runs before any of the unit's nodes.
  auto gather_for_backward = [weak](int u, const Tensor& y) -> Tensor {
    Tensor out = y.detach();
    autograd::record("zero3_gather_for_backward", {out}, {y},
                     [weak, u](const autograd::TensorList& grads, const autograd::NeedsGrad&) {
                       if (auto units = weak.lock()) {
                         units->backward_event();
                         units->gather(u);
                         if (const int before = units->previous(u); before >= 0) units->prefetch(before);
                       }
                       return grads;
                     });
    return out;
  };
  for (int u = 0; u < units_->size(); ++u) {
    nn::Module* module = unit_modules_[u];
    if (module == nullptr) continue;  // the root: below
    unit_hooks_.emplace_back(module, module->register_forward_pre_hook([weak, u](nn::Module&, const Tensor&) {
      if (auto units = weak.lock()) {
        units->gather(u);
        // Not in a checkpoint's recompute, inside backward: the next unit's forward is not coming.
        if (const int after = units->next(u); after >= 0 && !autograd::recomputing()) units->prefetch(after);
      }
      return Tensor();
    }));
    const bool reshard = options_.reshard_after_forward;
    auto after_unit = [weak, u, gather_for_backward, reshard](nn::Module&, const Tensor&, const Tensor& y) {
      auto units = weak.lock();
      if (!units) return Tensor();
      const bool backward_follows = autograd::grad_enabled() && y.defined() && y.requires_grad();
      if (!backward_follows) {  // released, unless a backward still to come holds it
        if (!units->held(u)) units->release(u);
        return Tensor();
      }
      if (!reshard) {  // kept until its gradients are final
        units->hold(u);
        return Tensor();
      }
      units->release(u);
      return gather_for_backward(u, y);
    };
    unit_hooks_.emplace_back(module, module->register_forward_hook(after_unit));
  }
  // The root unit: from the start of the forward; after it only when no backward follows.
  const int root = units_->root();
  auto before = [weak, root] {
    auto units = weak.lock();
    if (!units) return;
    if (root >= 0) {
      units->gather(root);
      if (autograd::grad_enabled()) units->hold(root);  // until its gradients are final
    }
    if (units->size() > root + 1) units->prefetch(root + 1);  // the first unit's forward comes next
  };
  auto after = [weak, root] {  // a forward without grad mode: released, unless a backward holds it
    auto units = weak.lock();
    if (units && root >= 0 && !autograd::grad_enabled() && !units->held(root)) units->release(root);
  };
  ddp_.set_forward_callbacks(this, before, after);
  // A forward of the model itself (an evaluation outside DDP) does the same through its hooks.
  nn::Module& model = ddp_.module();
  unit_hooks_.emplace_back(&model, model.register_forward_pre_hook([before](nn::Module&, const Tensor&) {
    before();
    return Tensor();
  }));
  unit_hooks_.emplace_back(&model, model.register_forward_hook([after](nn::Module&, const Tensor&, const Tensor&) {
    after();
    return Tensor();
  }));
  // Each unit is released as soon as all its gradients are final (Note [Gather, use, release]).
  const auto places = layout_.places(static_cast<int>(params_.size()));
  for (size_t i = 0; i < params_.size(); ++i) {
    if (places[i].first < 0) continue;  // no elements: not in a bucket's layout
    const int u = units_->unit_of_bucket(places[i].first);
    param_hooks_.emplace_back(i, params_[i].register_post_accumulate_grad_hook([weak, u](Tensor&) {
      if (auto units = weak.lock()) units->parameter_ready(u);
    }));
  }
  units_->release_all();  // from here on each unit is gathered only while used
  units_->reset_peak();
}

ZeroOptimizer::GatheredParameters::GatheredParameters(std::shared_ptr<GatheredUnits> units, bool write_back)
    : units_(std::move(units)), write_back_(write_back) {
  if (!units_) return;
  peak_before_ = units_->peak_gathered_bytes();
  for (int u = 0; u < units_->size(); ++u) was_gathered_.push_back(units_->gathered(u));
  units_->gather_all();
}

ZeroOptimizer::GatheredParameters::~GatheredParameters() {
  if (!units_ || units_->orphaned) return;  // no optimizer left to gather them again: they stay
  if (write_back_) units_->write_back();
  // What was gathered before the scope (the root, between a forward and its backward) stays so.
  for (int u = 0; u < units_->size(); ++u)
    if (!was_gathered_.at(u)) units_->release(u);
  units_->restore_peak(peak_before_);
}

ZeroOptimizer::GatheredParameters ZeroOptimizer::gathered_parameters(bool write_back) {
  return GatheredParameters(units_, write_back);
}

size_t ZeroOptimizer::parameter_shard_bytes() const { return units_ ? units_->shard_bytes() : 0; }
size_t ZeroOptimizer::peak_gathered_bytes() const { return units_ ? units_->peak_gathered_bytes() : 0; }
void ZeroOptimizer::reset_gathered_peak() {
  if (units_) units_->reset_peak();
}
std::vector<std::string> ZeroOptimizer::unit_names() const { return unit_paths_; }
GatherStats ZeroOptimizer::gather_stats() const { return units_ ? units_->stats() : GatherStats{}; }
void ZeroOptimizer::reset_gather_stats() {
  if (units_) units_->reset_stats();
}

// Stage 3 leaves the parameters as they are: released units stay released (gathering them would be
// collective, which a destructor must not be), and a gathered_parameters() scope still open keeps
// the units it gathered -- destroy the optimizer inside one to keep the full model.
ZeroOptimizer::~ZeroOptimizer() {
  for (const auto& [module, handle] : unit_hooks_) module->remove_forward_hook(handle);
  for (const auto& [param, handle] : param_hooks_) params_[param].remove_post_accumulate_grad_hook(handle);
  if (units_) units_->orphaned = true;
  ddp_.release_shard_owner(this);  // DDP's own hook again
}

std::string ZeroOptimizer::name() const { return str_cat("ZeRO-", options_.stage, "(", inner_->name(), ")"); }

size_t ZeroOptimizer::state_bytes() const { return inner_->state_bytes(); }

size_t ZeroOptimizer::reduced_gradient_bytes() const {
  size_t n = 0;
  if (reduced_)
    for (const Tensor& block : reduced_->blocks) n += block.nbytes();
  return n;
}

void ZeroOptimizer::ReducedGradients::clear() {
  std::fill(holds.begin(), holds.end(), false);
  consumed = false;
}

void ZeroOptimizer::zero_grad(bool set_to_none) {
  Optimizer::zero_grad(set_to_none);
  if (!reduced_) return;
  if (set_to_none) {
    reduced_->clear();
    return;
  }
  for (size_t b = 0; b < reduced_->blocks.size(); ++b)
    if (reduced_->holds[b]) reduced_->blocks[b].zero_();
  reduced_->consumed = false;
}

// Note [Parameters in shared memory] in dist/zero/zero_optimizer.h.
void ZeroOptimizer::place_parameters_in_shared_memory() {
  const int N = group_.size();
  if (N == 1) return;
  // Every rank decides alike: the parameters' shapes, dtypes and devices are the same everywhere.
  for (size_t b = 0; b < bucket_type_.size(); ++b)
    if (!group_.offers_shared_memory(bucket_type_[b].second)) return;
  for (const Tensor& p : params_)
    if (!p.is_contiguous()) return;
  // Where each parameter starts in its bucket: any piece of it tells, from its owner's block.
  const auto places = layout_.places(static_cast<int>(params_.size()));

  std::vector<Tensor> arenas;
  for (int b = 0; b < layout_.num_buckets(); ++b) {
    // Collective, in bucket order on every rank; null on every rank if any rank could not map it.
    Tensor arena =
        group_.new_reduction_buffer(N * layout_.block_numel(b), bucket_type_[b].first, bucket_type_[b].second);
    if (!group_.reduces_in_place(arena)) return;  // the ordinary allgather, through copies
    arenas.push_back(arena);
  }
  NoGradGuard no_grad;
  for (Tensor& arena : arenas) arena.zero_();  // the padding stays zero: no piece covers it
  for (size_t i = 0; i < params_.size(); ++i) {
    const auto [bucket, start] = places[i];
    if (bucket < 0) continue;  // no elements, so no piece
    Tensor& p = params_[i];
    p.move_into(arenas[bucket].narrow(0, start, p.numel()).view(p.shape()));
  }
  param_arenas_ = std::move(arenas);
}

bool ZeroOptimizer::whole(const ShardPiece& piece) const { return piece.numel == params_[piece.param].numel(); }

Tensor ZeroOptimizer::flat(const ShardPiece& piece) const {
  return params_[piece.param].detach().view({-1}).narrow(0, piece.param_offset, piece.numel);
}

void ZeroOptimizer::set_piece_gradients() {
  for (size_t j = 0; j < pieces_.size(); ++j) {
    const ShardPiece& piece = piece_of_[j];
    const Tensor& param = params_[piece.param];
    if (options_.stage >= 2) {  // .grad is none: the buffers were released after the reduction
      if (!reduced_->holds[piece.bucket]) {
        pieces_[j].set_grad(Tensor());
        continue;
      }
      const Tensor slice = reduced_->blocks[piece.bucket].narrow(0, piece.block_offset, piece.numel);
      pieces_[j].set_grad(whole(piece) ? slice.view(param.shape()) : slice);
      continue;
    }
    const Tensor g = param.grad();
    if (!g.defined()) {
      pieces_[j].set_grad(Tensor());
      continue;
    }
    // Stage 1: the averaged .grad, which DDP keeps as a view into its bucket. A .grad replaced by
    // something else would have the piece updated from a copy that clipping or unscaling never sees.
    RG_CHECK(g.is_contiguous() && g.dtype() == param.dtype(), "dist.ZeroOptimizer", "rank ", group_.rank(), "/",
             group_.size(), ": the gradient of '", names_[piece.param], "' is ", g.desc(),
             "; a sharded optimizer needs the dense gradient of the parameter's dtype that DDP leaves there");
    pieces_[j].set_grad(whole(piece) ? g : g.view({-1}).narrow(0, piece.param_offset, piece.numel));
  }
}

std::vector<Tensor> ZeroOptimizer::step_gradients() {
  if (options_.stage == 1) return Optimizer::step_gradients();
  set_piece_gradients();
  std::vector<Tensor> grads;
  for (const Tensor& p : pieces_)
    if (p.grad().defined()) grads.push_back(p.grad());
  return grads;
}

bool ZeroOptimizer::agree_on_found_inf(bool found) {
  // The GradScaler asks once per step, whether it then steps or skips: either way this step's
  // gradient is spent (Note [A step consumes the reduced gradient]).
  if (reduced_) reduced_->consumed = true;
  if (group_.size() == 1) return found;
  Tensor flag = full({1}, found ? 1.0 : 0.0, {.dtype = DType::i32});
  group_.allreduce(flag, ReduceOp::max)->wait();
  return flag.item() != 0;
}

double ZeroOptimizer::clip_grad_norm(double max_norm) {
  NoGradGuard no_grad;
  set_piece_gradients();
  double local_sq = 0;
  for (const Tensor& p : pieces_) {
    if (!p.grad().defined()) continue;
    const Tensor g64 = p.grad().to(DType::f64);
    local_sq += (g64 * g64).sum().item();
  }
  Tensor total = full({1}, local_sq, {.dtype = DType::f64});
  if (group_.size() > 1) group_.allreduce(total, ReduceOp::sum)->wait();
  const double norm = std::sqrt(total.item());
  const double coef = max_norm / (norm + 1e-6);  // as optim::clip_grad_norm
  if (coef < 1)
    for (const Tensor& p : pieces_)
      if (p.grad().defined()) p.grad().mul_(coef);
  return norm;
}

void ZeroOptimizer::update() {
  set_piece_gradients();
  for (size_t g = 0; g < groups_.size(); ++g) {  // a schedule sets the outer groups' learning rates
    inner_->param_groups()[g].lr = groups_[g].lr;
    inner_->param_groups()[g].weight_decay = groups_[g].weight_decay;
  }
  // Stage 3: the shards are about to change, so the gathered copies go (and no prefetch still reads
  // a shard); the next forward gathers the new values.
  if (units_) units_->release_all();
  inner_->step();
  if (reduced_) reduced_->consumed = true;
  if (!units_) gather_parameters();
}

void ZeroOptimizer::gather_parameters() {
  const int N = group_.size(), rank = group_.rank();
  if (N == 1) return;  // every piece is this rank's
  NoGradGuard no_grad;
  if (!param_arenas_.empty()) {
    // Each bucket's parameters are one (N, m) view of shared memory, this rank's block updated in
    // place: the allgather copies between the ranks' buffers, nothing into or out of them.
    std::vector<std::shared_ptr<Work>> works;
    for (int b = 0; b < layout_.num_buckets(); ++b) {
      const int64_t m = layout_.block_numel(b);
      const Tensor& arena = param_arenas_[b];
      works.push_back(group_.allgather(arena.view({N, m}), arena.narrow(0, rank * m, m)));
    }
    for (const auto& work : works) work->wait();
    return;
  }
  std::vector<Tensor> gathered(layout_.num_buckets());
  std::vector<std::shared_ptr<Work>> works;
  for (int b = 0; b < layout_.num_buckets(); ++b) {
    const int64_t m = layout_.block_numel(b);
    const TensorOptions type{.dtype = bucket_type_[b].first, .device = bucket_type_[b].second};
    Tensor block = empty({m}, type);
    int64_t filled = 0;
    for (const ShardPiece& piece : layout_.pieces(rank))
      if (piece.bucket == b) {
        block.narrow(0, piece.block_offset, piece.numel).copy_(flat(piece));
        filled += piece.numel;
      }
    if (filled < m) block.narrow(0, filled, m - filled).zero_();  // the bucket's padding, in the last block
    gathered[b] = empty({N, m}, type);
    works.push_back(group_.allgather(gathered[b], block));
  }
  for (int b = 0; b < layout_.num_buckets(); ++b) {
    works[b]->wait();
    const Tensor all = gathered[b].view({-1});
    const int64_t m = layout_.block_numel(b);
    for (int r = 0; r < N; ++r) {
      if (r == rank) continue;
      for (const ShardPiece& piece : layout_.pieces(r))
        if (piece.bucket == b) flat(piece).copy_(all.narrow(0, r * m + piece.block_offset, piece.numel));
    }
    gathered[b] = Tensor();  // one bucket's parameters at a time beyond what is in flight
  }
}

nn::StateDict ZeroOptimizer::state_dict() const {
  RG_FAIL("dist.ZeroOptimizer", "rank ", group_.rank(), "/", group_.size(),
          ": the optimizer state is sharded across the ranks, so no rank holds a full state_dict(). Save it with "
          "save_sharded(dir) on every rank; consolidate_sharded(dir) reads the full state back, and "
          "load_sharded(dir) restores it at any world size");
}

void ZeroOptimizer::load_state_dict(const nn::StateDict& state) {
  // Every entry is checked against its parameter on every rank, whichever rank steps it, so that a
  // malformed state fails everywhere alike.
  std::map<size_t, std::vector<std::pair<std::string, Tensor>>> by_param;
  for (const auto& [key, t] : state) {
    const size_t dot = key.find('.');
    const std::string head = key.substr(0, dot);
    RG_CHECK(dot != std::string::npos && !head.empty() && head.size() < 10 &&
                 std::all_of(head.begin(), head.end(), [](unsigned char c) { return std::isdigit(c); }),
             "dist.ZeroOptimizer", "rank ", group_.rank(), "/", group_.size(), ": state entry '", key,
             "' is not '<parameter index>.<what>'");
    const size_t i = std::stoul(head);
    RG_CHECK(i < params_.size(), "dist.ZeroOptimizer", "rank ", group_.rank(), "/", group_.size(), ": state entry '",
             key, "' is for parameter ", i, ", but the optimizer holds ", params_.size());
    RG_CHECK(t.dim() == 0 || t.numel() == params_[i].numel(), "dist.ZeroOptimizer", "rank ", group_.rank(), "/",
             group_.size(), ": state entry '", key, "' (", names_[i], ") has shape ", shape_str(t.shape()),
             ", parameter has ", shape_str(params_[i].shape()));
    by_param[i].emplace_back(key.substr(dot + 1), t);
  }
  nn::StateDict pieces_state;
  for (size_t j = 0; j < pieces_.size(); ++j) {
    const ShardPiece& piece = piece_of_[j];
    auto it = by_param.find(static_cast<size_t>(piece.param));
    if (it == by_param.end()) continue;  // the sharded optimizer names what is missing
    for (const auto& [what, t] : it->second) {
      // A whole parameter's entries pass as they are (their shape is the parameter's, or a scalar
      // such as Adam's step); a cut one's per-element entries are sliced to its range.
      const bool per_element = t.dim() > 0 && !whole(piece);
      pieces_state.emplace_back(str_cat(j, ".", what),
                                per_element
                                    ? t.contiguous().view({-1}).narrow(0, piece.param_offset, piece.numel).contiguous()
                                    : t);
    }
  }
  inner_->load_state_dict(pieces_state);  // checks every entry before it changes anything
}

}  // namespace ringgrad::dist
