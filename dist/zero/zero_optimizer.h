// ZeroOptimizer: ZeRO stages 1, 2 and 3 -- the optimizer state, at stage 2 the averaged gradients
// too, at stage 3 the parameters too, sharded across the ranks of a DistributedDataParallel model
// (DeepSpeed's ZeRO, PyTorch's ZeroRedundancyOptimizer, FSDP's SHARD_GRAD_OP and FULL_SHARD).
//
//   dist::DistributedDataParallel ddp(model, group);
//   auto opt = dist::ZeroOptimizer::over<optim::AdamW>(ddp, optim::AdamWOptions{.lr = 3e-4}, {.stage = 2});
//   for (auto& [x, y] : loader) {
//     opt->zero_grad();
//     cross_entropy(ddp(x), y).backward();   // stage 2: each bucket is reduce-scattered as it fills
//     opt->clip_grad_norm(1.0);              // the global norm: one AllReduce of the shards' squares
//     opt->step();                           // this rank's block, then an allgather of the parameters
//   }
//
// Memory per rank, Ψ parameters of f16 with Adam (docs/zero.md has this machine's measured bytes):
//   DDP      2Ψ params + 2Ψ grads + 12Ψ state (f32 master 4, moments 8)   = 16Ψ
//   stage 1  2Ψ + 2Ψ + 12Ψ/N                                                = (4 + 12/N)Ψ
//   stage 2  2Ψ + 2Ψ/N reduced gradient + 12Ψ/N                             = (2 + 14/N)Ψ
//            between steps; during a backward the full-size buckets exist too (see Contracts)
//   stage 3  2Ψ/N + 2Ψ/N + 12Ψ/N                                              = 16Ψ/N
//            between steps; during a step the units gathered at a time (the root and about two
//            blocks) and, as at stage 2, the full-size gradient buckets until reduced. How stage 3
//            gathers and releases: Note [Gather, use, release] in dist/zero/gathered_units.h.
//
// How a step goes (Note [Shards cut across parameters] in dist/zero/shard_layout.h says who owns what):
//  1. DDP's buckets are padded to a multiple of N elements and their layout fixed (Note [Buckets for
//     sharding], dist/ddp/reducer.h); rank r owns block r of every bucket.
//  2. Backward, stage 1: DDP AllReduces each bucket as usual, so every rank holds the whole averaged
//     gradient. Stage 2: a communication hook reduce-scatters each bucket instead, from the same
//     backward-order hooks and with the same overlap, into this rank's block (m elements): half the
//     AllReduce's traffic, and the reduced gradient exists only as the 1/N block.
//  3. step(): the wrapped optimizer (any of ringgrad's: SGD, Adam, AdamW) updates this rank's pieces
//     of the parameters -- views into the parameters' own storage -- with state sized for its pieces
//     only. The updates are elementwise, so each element gets exactly the update a DDP replica gives
//     it.
//  4. Each bucket's updated blocks are all-gathered in the parameters' dtype, so every replica holds
//     every parameter again before the next forward. On one machine the parameters themselves live
//     in shared memory and the allgather copies between the ranks' buffers (Note [Parameters in
//     shared memory]); elsewhere each block travels through a staging copy.
//
// Why a wrapper rather than DDPOptions::zero_stage: sharding changes what the *optimizer* holds and
// when it talks to the other ranks (the step ends with an allgather), while DDP only needs its
// buckets padded. As an optim::Optimizer, the wrapper keeps every tool built on one working --
// GradScaler (it unscales and checks the shard, and the ranks agree on found-inf), LR schedules
// (set_lr), param_groups -- and wraps any optimizer without each learning about ranks.
//
// Contracts:
//  - Construction is collective (it rebuilds DDP's buckets) and must hold every trainable parameter
//    of the DDP model. The DDP must outlive the ZeroOptimizer. Stage 2 installs its own communication
//    hook (a DDP comm hook set before is replaced; set after, it would break stage 2).
//  - Stage 3: between a unit's uses its parameters are released (a read throws); the model's
//    forward must call the units through operator(), whose hooks gather them, and whole-model
//    reads and writes go inside gathered_parameters(). Parameters must be contiguous. Every rank
//    must run the same units in the same order (the gathers are collectives): a unit some ranks
//    skip (find_unused_parameters with a different unused set per rank) is not supported. Each
//    forward with grad mode is followed by its one backward before the next such forward (no
//    retain_graph second backward; no two forwards, then two backwards).
//  - step() is collective: every rank must call it, also when its GradScaler skips (it does when any
//    rank overflowed: agree_on_found_inf). dist::Join is not supported (a rank out of data takes no
//    step); keep the batch counts even.
//  - Stage 2: backward's gradients go into full-size bucket buffers, as DDP's do, which are freed
//    once the bucket is reduce-scattered; after a synchronising backward every .grad is none (Note
//    [Gradient buffers released after the reduction], dist/ddp/reducer.h). Read gradients through
//    clip_grad_norm / step_gradients(). Under no_sync the buffers stay, holding the accumulated sums.
//
// Note [A step consumes the reduced gradient]: at stage 2 the averaged gradient lives in this
// optimizer (its blocks), not in the parameters' .grad, so a model's zero_grad() cannot reach it.
// As in DeepSpeed's ZeRO, a step spends it: after step() -- or a step the GradScaler skipped (it
// asks agree_on_found_inf every step) -- the next backward starts a new gradient, whether or not
// zero_grad() ran. Before that, backwards add up (two backwards, one step: the sum, as with DDP),
// and this optimizer's zero_grad() clears it. So training loops that zero through the model or
// through the optimizer both work; one that meant to carry gradients across steps (DDP without any
// zero_grad) would not, and is not supported.
// Note [Parameters in shared memory]: the allgather ends every step, after the last bucket's
// reduction, so nothing overlaps it; over messages it costs a copy of this rank's pieces into a
// block, the exchange, and a copy of every other rank's pieces out of the (N, m) result -- on
// gpt_mini at 2 ranks about a sixth of a step. When the group can reduce in shared memory
// (ProcessGroup::reduces_in_place: backends "auto" and "tree" with every rank on one machine, CPU
// tensors), the constructor moves each bucket's parameters into one buffer from
// new_reduction_buffer, laid out as the bucket is (Tensor::move_into: every handle of a parameter,
// the model's included, then points into it). Rank r's pieces are then block r of that buffer
// already, the inner optimizer updates them there, and the allgather in place (Note [Allgather in
// a shared buffer], dist/shm/reduction_buffer.h) copies each block into every other rank's buffer:
// no staging block, no gathered tensor, no copy out. The padding at the end of the last block is
// zero and nothing writes it. What a user sees: a parameter's storage changes once, at
// construction, so a view of a parameter taken before it (a tensor holding `weight.view(...)`)
// keeps the old elements and no longer follows training -- take views after building the
// optimizer, as with PyTorch's FSDP, which flattens parameters the same way. Shared memory is not
// counted by the allocator's statistics (docs/zero.md adds it back). Parameters that are not all
// contiguous, CUDA buckets, one rank, or a group without shared memory keep the ordinary path.
//
//  - The optimizer state is sharded, so state_dict() is refused: save_sharded() writes each rank's
//    shard and an index, consolidate_sharded() reads them back as one full state (the layout a plain
//    optimizer's state_dict_by_name writes), and load_sharded() restores at any world size.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dist/ddp/ddp.h"
#include "dist/zero/gathered_units.h"
#include "dist/zero/shard_layout.h"
#include "optim/optimizer.h"

namespace ringgrad::dist {

struct ZeroOptions {
  // 1: optimizer state sharded, gradients AllReduced as by DDP. 2: gradients reduce-scattered too.
  // 3: parameters sharded too, each unit gathered only while its forward and backward run (Note
  // [Gather, use, release] in dist/zero/gathered_units.h).
  int stage = 1;
  // Stage 2 on one machine: the most shared memory per rank its reduce-scatters pass through (Note
  // [Reduce-scatter through a shared buffer], dist/shm/reduction_buffer.h). Smaller: less memory,
  // a larger bucket takes more rounds, each an arrival of every rank (keep a round in the hundreds
  // of KiB). Never more than the largest bucket. The same on every rank (checked).
  double staging_mb = 1;
  // Stage 3: the modules gathered and released together, by path ("h.0", "h.1", ...), none inside
  // another. Empty: every child of an nn::Sequential / nn::ModuleList that holds parameters (GPT's
  // blocks, an MLP's layers). The parameters in no unit form the root unit, gathered from the start
  // of a forward to the end of its backward (Note [Units of stage 3]).
  std::vector<std::string> units;
  // Stage 3: release each unit after its forward and gather it again for its backward (true, FSDP's
  // default), or keep it from its forward until its gradients are final (false: one allgather per unit
  // per step instead of two -- DDP's traffic -- for every unit's parameters alive at the end of the
  // forward, as at stage 2). Forwards without grad mode release either way.
  bool reshard_after_forward = true;
  // Stages 2 and 3: each bucket's reduce-scatter sends its partial sums in this wire format -- bf16,
  // or FP8 with a scale per scale_block elements -- and adds them in f32
  // (ProcessGroup::reduce_scatter_low_precision; docs/compression.md). Unset: the bucket's own
  // dtype. Without error feedback: its residual is an f32 copy of every gradient on every rank, 4
  // bytes per parameter -- more than the gradients stage 2 shards away. CPU buckets on an MPI
  // backend (checked; stage 1 refuses it: its reduction is DDP's, choose a comm hook there).
  std::optional<WireFormat> reduce_scatter_wire = std::nullopt;
  int64_t scale_block = kDefaultScaleBlock;
};

class ZeroOptimizer : public optim::Optimizer {
 public:
  // Builds the optimizer that steps this rank's pieces, from their parameter groups (one per group
  // of `groups`, with its lr and weight_decay; a group may be empty on this rank).
  using MakeOptimizer = std::function<std::unique_ptr<optim::Optimizer>(std::vector<optim::ParamGroup>)>;

  ZeroOptimizer(DistributedDataParallel& ddp, std::vector<optim::ParamGroup> groups, MakeOptimizer make,
                ZeroOptions options = {});
  ~ZeroOptimizer() override;

  // Every trainable parameter of the DDP model in one group, stepped by Opt built with `options`
  // (SGD, Adam, AdamW and their option structs):
  //   auto opt = ZeroOptimizer::over<optim::Adam>(ddp, optim::AdamOptions{.lr = 1e-3}, {.stage = 1});
  template <class Opt, class Options>
  static std::unique_ptr<ZeroOptimizer> over(DistributedDataParallel& ddp, const Options& options,
                                             ZeroOptions zero = {}) {
    std::vector<Tensor> params;
    for (const auto& [name, t] : ddp.module().named_parameters())
      if (t.requires_grad()) params.push_back(t);
    return std::make_unique<ZeroOptimizer>(
        ddp, std::vector<optim::ParamGroup>{{params, options.lr, options.weight_decay}},
        [options](std::vector<optim::ParamGroup> groups) { return std::make_unique<Opt>(std::move(groups), options); },
        zero);
  }

  std::string name() const override;
  int stage() const { return options_.stage; }
  const ShardLayout& layout() const { return layout_; }

  // This rank's optimizer state: about 1/N of a replica's (Note [Shards cut across parameters]).
  size_t state_bytes() const override;
  std::vector<std::pair<std::string, size_t>> state_bytes_by_kind() const override {
    return inner_->state_bytes_by_kind();
  }
  // Stage 2: the bytes of this rank's reduced gradient blocks (0 at stage 1).
  size_t reduced_gradient_bytes() const;
  // Stage 2 on one machine: the shared-memory staging its reduce-scatters go through (Note
  // [Reduce-scatter through a shared buffer]), per rank, outside the allocator's count; else 0.
  size_t staging_bytes() const { return staging_bytes_; }
  // Whether the parameters live in shared memory (Note [Parameters in shared memory]).
  bool parameters_in_shared_memory() const { return !param_arenas_.empty(); }

  // Stage 3 (Note [Gather, use, release], dist/zero/gathered_units.h). Outside a unit's forward and
  // backward its parameters are released: a read of them throws. Read or write the whole model
  // inside this scope (FSDP's summon_full_params): it gathers every unit (collective) and releases
  // them when it ends; with `write_back`, what was written into the parameters meanwhile (a loaded
  // state dict) is copied into the shards first, so training goes on from it. A no-op below stage 3.
  // Not counted in peak_gathered_bytes(), which is about training.
  //   { auto full = zero.gathered_parameters(); save(model.state_dict()); }
  class GatheredParameters {
   public:
    GatheredParameters(GatheredParameters&& other) noexcept
        : units_(std::move(other.units_)),
          write_back_(other.write_back_),
          peak_before_(other.peak_before_),
          was_gathered_(std::move(other.was_gathered_)) {}
    GatheredParameters(const GatheredParameters&) = delete;
    GatheredParameters& operator=(const GatheredParameters&) = delete;
    ~GatheredParameters();

   private:
    friend class ZeroOptimizer;
    GatheredParameters(std::shared_ptr<GatheredUnits> units, bool write_back);
    std::shared_ptr<GatheredUnits> units_;
    bool write_back_;
    size_t peak_before_ = 0;          // the whole model gathered here is not training's peak
    std::vector<bool> was_gathered_;  // per unit, when the scope began
  };
  [[nodiscard]] GatheredParameters gathered_parameters(bool write_back = false);
  // Stage 3: this rank's shards of the parameters (persistent), the gathered units' bytes at their
  // most since construction or reset_gathered_peak(), and the units' names in forward order.
  size_t parameter_shard_bytes() const;
  size_t peak_gathered_bytes() const;
  void reset_gathered_peak();
  std::vector<std::string> unit_names() const;
  // Stage 3: the allgathers of the units and the time the training thread waited for them (Note
  // [Gather, use, release]); zeros below stage 3.
  GatherStats gather_stats() const;
  void reset_gather_stats();

  // Stage 1: every parameter's .grad (each rank holds the whole averaged gradient). Stage 2: the
  // gradient of this rank's pieces, from the reduce-scattered blocks.
  std::vector<Tensor> step_gradients() override;
  // A max AllReduce of the flag: at stage 2 each rank sees only its block of the gradient.
  bool agree_on_found_inf(bool found) override;

  // Clips the gradients this rank steps so that the global L2 norm over every parameter's averaged
  // gradient is at most max_norm (torch.nn.utils.clip_grad_norm_ over the whole model); returns the
  // norm before clipping. Collective: each rank sums its pieces' squares, one AllReduce adds them.
  double clip_grad_norm(double max_norm);

  // Also clears the reduced gradient blocks at stage 2 (Note [A step consumes the reduced gradient]).
  void zero_grad(bool set_to_none = true) override;

  // Refused: the state is sharded (save_sharded, consolidate_sharded).
  nn::StateDict state_dict() const override;
  // A full optimizer state, keyed by parameter index as Optimizer::state_dict writes it (or by name
  // through optim::load_state_dict_by_name): each rank keeps the slices of its pieces. Not collective.
  void load_state_dict(const nn::StateDict& state) override;

  // This rank's shard as it is saved: "piece.<name>.range" (i64 [offset, numel] in the flattened
  // parameter) and "piece.<name>.<what>" (1-D slices of the state, or scalars such as "step").
  nn::StateDict shard_state_dict() const;
  // Collective. Writes this rank's shard and, once every rank's write succeeded, rank 0 writes the
  // index (Note [Sharded checkpoint files] in dist/zero/zero_checkpoint.cpp: atomic, checksummed
  // files; the previous save stays readable until the next one completes). `dir` must be a folder
  // every rank sees. A failed write on any rank is an error on every rank, naming the rank and the
  // file. Returns the save's id, for a training checkpoint to record.
  int64_t save_sharded(const std::string& dir) const;
  // Collective. Restores the state from save_sharded's files -- the latest save in `dir`, or the
  // one with `save_id` -- saved at any world size: the shards are consolidated and this rank keeps
  // its pieces (resharding). Every rank reads every shard. A failure on any rank is an error on
  // every rank, and the state is left as it was.
  void load_sharded(const std::string& dir, std::optional<int64_t> save_id = std::nullopt);

 protected:
  void update() override;

 private:
  void build_shards();                       // the constructor's work once DDP's buckets are this optimizer's
  void set_piece_gradients();                // points each piece's .grad at its gradient for this step
  void place_parameters_in_shared_memory();  // Note [Parameters in shared memory]
  // Stage 3: the units' parameter names, in bucket order (the last unit first, the root last), and
  // the modules whose hooks gather them (Note [Units of stage 3]).
  std::vector<std::vector<std::string>> choose_units();
  void shard_parameters();  // stage 3: the parameters into gathered buffers, the shards cut out
  void install_unit_hooks();
  void gather_parameters();                    // step 4: the allgather of every bucket's updated blocks
  Tensor flat(const ShardPiece& piece) const;  // the piece's elements in its parameter (a 1-D view)
  bool whole(const ShardPiece& piece) const;   // the piece is its whole parameter

  DistributedDataParallel& ddp_;
  ProcessGroup& group_;
  ZeroOptions options_;
  MakeOptimizer make_;
  std::vector<Tensor> params_;                         // parameters(), cached
  std::vector<std::string> names_;                     // the model's name of each
  std::vector<std::pair<DType, Device>> bucket_type_;  // per bucket
  ShardLayout layout_;
  std::vector<Tensor> pieces_;        // this rank's pieces: flat views into the parameters,
  std::vector<ShardPiece> piece_of_;  // in the inner optimizer's order (group by group)
  // Stage 2: per bucket, this rank's reduced block (m), shared with the communication hook.
  struct ReducedGradients {
    std::vector<Tensor> blocks;
    std::vector<bool> holds;  // the block holds a gradient (else the next reduction overwrites it)
    bool consumed = false;    // Note [A step consumes the reduced gradient]
    void clear();
  };
  std::shared_ptr<ReducedGradients> reduced_;
  // Per bucket, the shared memory its parameters live in (N m elements), or none.
  std::vector<Tensor> param_arenas_;
  size_t staging_bytes_ = 0;
  std::unique_ptr<optim::Optimizer> inner_;  // steps pieces_
  // Stage 3: the units (root first, when it holds parameters, then forward order), their modules
  // (null for the root), and the forward hooks installed on them.
  std::vector<std::string> unit_paths_;
  std::vector<nn::Module*> unit_modules_;
  std::vector<std::pair<nn::Module*, int>> unit_hooks_;
  std::vector<std::pair<size_t, int>> param_hooks_;  // parameter index, post-accumulate-grad hook
  std::shared_ptr<GatheredUnits> units_;
};

// The full optimizer state of the sharded checkpoint in `dir` (its latest save, or save `save_id`), keyed by parameter name as
// optim::state_dict_by_name writes it ("fc1.weight.exp_avg", "fc1.weight.step",
// "param_groups.0.lr"), so a plain optimizer can load it with optim::load_state_dict_by_name. Every
// shard is checked against the index (world size, save id, pieces tiling each parameter exactly);
// an error names the file.
nn::StateDict consolidate_sharded(const std::string& dir, std::optional<int64_t> save_id = std::nullopt);

}  // namespace ringgrad::dist
