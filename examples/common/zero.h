// The examples' --zero and --memory-report: an optimizer plain or sharded (dist::ZeroOptimizer),
// the calls that differ between the two, and where a rank's memory goes.
#pragma once

#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/error.h"
#include "core/ops.h"
#include "dist/ddp/ddp.h"
#include "dist/zero/zero_optimizer.h"
#include "optim/clip_grad.h"
#include "optim/optimizer.h"
#include "optim/training_checkpoint.h"

namespace ringgrad::examples {

// Stage 0: make(groups) itself. Stage 1, 2 or 3: a ZeroOptimizer over `ddp` stepping this rank's
// pieces with what make builds, its reduce-scatter in `wire` if given (stages 2, 3). Collective
// when stage > 0.
inline std::unique_ptr<optim::Optimizer> plain_or_sharded(int stage, dist::DistributedDataParallel& ddp,
                                                          std::vector<optim::ParamGroup> groups,
                                                          const dist::ZeroOptimizer::MakeOptimizer& make,
                                                          std::optional<dist::WireFormat> wire = std::nullopt) {
  if (stage == 0) return make(std::move(groups));
  return std::make_unique<dist::ZeroOptimizer>(ddp, std::move(groups), make,
                                               dist::ZeroOptions{.stage = stage, .reduce_scatter_wire = wire});
}

inline dist::ZeroOptimizer* as_sharded(optim::Optimizer& opt) { return dynamic_cast<dist::ZeroOptimizer*>(&opt); }

// Stage 3 keeps 1/N of the parameters between forwards: what reads the whole model (a checksum, a
// checkpoint's save) or writes it (a checkpoint's load: `write_back`) runs while this is alive.
// Collective at stage 3; nothing otherwise.
inline std::optional<dist::ZeroOptimizer::GatheredParameters> whole_model(optim::Optimizer& opt,
                                                                          bool write_back = false) {
  if (dist::ZeroOptimizer* zero = as_sharded(opt)) return zero->gathered_parameters(write_back);
  return std::nullopt;
}

// Stage 3's gathers per step (Note [Gather, use, release]): how many, how many bytes, and how long
// the training thread waited for them, i.e. what prefetching did not hide. Empty below stage 3.
inline std::string gather_summary(optim::Optimizer& opt, int64_t steps) {
  dist::ZeroOptimizer* zero = as_sharded(opt);
  if (zero == nullptr || zero->stage() != 3 || steps <= 0) return "";
  const dist::GatherStats s = zero->gather_stats();
  const auto per_step = [steps](double x) { return x / static_cast<double>(steps); };
  return str_cat("zero-3: ", std::round(per_step(static_cast<double>(s.allgathers)) * 10) / 10,
                 " allgathers per step, ",
                 std::round(per_step(static_cast<double>(s.bytes)) / 1024.0 / 1024.0 * 100) / 100,
                 " MiB gathered per step, ", std::round(per_step(s.exposed_ms) * 100) / 100,
                 " ms per step waiting for them (exposed)\n");
}

// Global-norm clipping: over the model's gradients, or (sharded) over each rank's pieces plus one
// AllReduce -- at stage 2 a parameter's .grad is not the averaged gradient.
inline double clip_gradients(optim::Optimizer& opt, const std::vector<Tensor>& params, double max_norm) {
  if (dist::ZeroOptimizer* zero = as_sharded(opt)) return zero->clip_grad_norm(max_norm);
  return optim::clip_grad_norm(params, max_norm);
}

// A sharded optimizer's state lives beside the training checkpoint, in a folder of shards; the
// checkpoint's metadata "zero_save_id" names the save it goes with.
inline std::string shard_folder(const std::string& checkpoint) { return checkpoint + ".zero"; }

// The save a loaded training checkpoint names (a checkpoint written without --zero names none:
// the latest save in the folder is then taken).
inline std::optional<int64_t> zero_save_id(const optim::TrainingCheckpoint& checkpoint) {
  auto it = checkpoint.metadata.find("zero_save_id");
  if (it == checkpoint.metadata.end()) return std::nullopt;
  const int64_t* id = std::get_if<int64_t>(&it->second);
  RG_CHECK(id != nullptr, "examples", "the checkpoint's metadata 'zero_save_id' is not an integer");
  return *id;
}

// Where this rank's memory goes: Ψ, the bytes per parameter of parameters, gradients and optimizer
// state, and the allocator's figures around training. Collective (sums over ranks); every rank
// gets the text, rank 0 prints it.
//   allocated_before: memory_stats(device).allocated when training began, after which the peak was reset.
//   activations: measured by the caller, if it did (ActivationMeasure).
struct ActivationMeasure {
  size_t activation_bytes = 0;  // the most a forward left allocated for its backward; 0: not measured
  std::string activation_note;  // what they are (e.g. whether blocks were checkpointed)
  size_t modelled_bytes = 0;    // what a model of the saved tensors predicts; 0: no model
};
inline std::string memory_report(const nn::Module& model, optim::Optimizer& opt, dist::DistributedDataParallel& ddp,
                                 Device device, size_t allocated_before, const ActivationMeasure& activations = {},
                                 const dist::CommHookState* hook_state = nullptr) {
  int64_t psi = 0;
  size_t param_bytes = 0;
  for (const Tensor& p : model.parameters())
    if (p.requires_grad()) {
      psi += p.numel();
      param_bytes += p.nbytes();
    }
  dist::ZeroOptimizer* zero = as_sharded(opt);
  const bool stage3 = zero != nullptr && zero->stage() == 3;
  if (stage3) param_bytes = zero->parameter_shard_bytes();
  size_t bucket_bytes = 0;
  bool shared = false, persistent = true;
  for (const dist::BucketInfo& b : ddp.buckets()) {
    bucket_bytes += static_cast<size_t>(b.numel) * dtype_size(b.dtype);
    shared |= b.in_shared_memory;
    persistent &= b.persistent;
  }
  const size_t reduced = zero != nullptr ? zero->reduced_gradient_bytes() : 0;
  const size_t state = opt.state_bytes();
  Tensor all_state = full({1}, static_cast<double>(state), {.dtype = DType::i64});
  ddp.group().allreduce(all_state, dist::ReduceOp::sum)->wait();
  const MemoryStats stats = memory_stats(device);
  const int N = ddp.group().size();
  auto mib = [](double bytes) { return str_cat(std::round(bytes / (1024.0 * 1024.0) * 100) / 100, " MiB"); };
  auto per_param = [&](double bytes) {
    return str_cat(std::round(bytes / static_cast<double>(std::max<int64_t>(psi, 1)) * 100) / 100, " B/param");
  };
  auto line = [&](const char* what, double bytes, const std::string& note) {
    return str_cat("  ", what, mib(bytes), "  ", per_param(bytes), note.empty() ? "" : " (" + note + ")", "\n");
  };
  // Between steps: stage 2's buckets exist only from a backward's first gradient until reduced.
  const size_t hook_bytes = hook_state != nullptr ? static_cast<size_t>(hook_state->state_bytes()) : 0;
  const double model_state =
      static_cast<double>(param_bytes + (persistent ? bucket_bytes : 0) + reduced + state + hook_bytes);
  std::string out =
      str_cat("memory report (rank ", ddp.group().rank(), " of ", N, ", ", opt.name(), "): Ψ = ", psi, " parameters\n");
  const bool params_shared = zero != nullptr && zero->parameters_in_shared_memory();
  out += line("parameters        ", param_bytes,
              params_shared ? "in shared memory: outside the allocator's count"
              : stage3      ? "this rank's shards; each unit gathered only while its forward or backward runs"
                            : "");
  out += line("gradients         ", bucket_bytes,
              !persistent ? "DDP buckets, only during a backward: freed once reduce-scattered"
              : shared    ? "DDP buckets, in shared memory: outside the allocator's count"
                          : "DDP buckets");
  if (zero != nullptr && zero->stage() >= 2)
    out += line("reduced gradient  ", reduced, "this rank's reduce-scattered blocks");
  if (zero != nullptr && zero->staging_bytes() > 0)
    out += line("scatter staging   ", static_cast<double>(zero->staging_bytes()),
                "shared memory the reduce-scatters pass through (the largest bucket, at most ZeroOptions::staging_mb; "
                "a larger bucket in rounds): outside the allocator's count, not model state");
  out += line("optimizer state   ", state,
              zero != nullptr ? str_cat("1/", N, " of the ", per_param(all_state.item()), " all ranks hold together")
                              : "every rank holds a whole copy");
  for (const auto& [kind, bytes] : opt.state_bytes_by_kind()) {  // e.g. f16 Adam: master weights 4, moments 8
    std::string label = "  " + kind;
    label.resize(std::max<size_t>(label.size(), 18), ' ');
    out += line(label.c_str(), static_cast<double>(bytes), "");
  }
  if (hook_bytes > 0)
    out += line("comm hook state   ", static_cast<double>(hook_bytes),
                "kept by --comm-hook between steps: error feedback's residuals, f32 per gradient element, and "
                "PowerSGD's Qs");
  out += line("model state       ", model_state,
              persistent ? "the sum of the above" : "the sum of the above, less the buckets: between steps");
  if (stage3)
    out += line("gathered units    ", static_cast<double>(zero->peak_gathered_bytes()),
                "the most gathered at once: the root unit and the units computing or prefetched; not model state");
  if (activations.activation_bytes > 0) {
    std::string model;
    if (activations.modelled_bytes > 0) {
      const double off =
          (static_cast<double>(activations.activation_bytes) / static_cast<double>(activations.modelled_bytes) - 1.0) *
          100.0;
      model = str_cat("; the model of the saved tensors: ", mib(static_cast<double>(activations.modelled_bytes)),
                      ", measured ", off >= 0 ? "+" : "", std::round(off * 10) / 10, "%");
    }
    out += line("activations       ", static_cast<double>(activations.activation_bytes),
                str_cat("measured: allocated after a forward less before it, the largest micro-batch; ",
                        activations.activation_note, model));
  }
  out += str_cat("  allocator         ", mib(allocated_before),
                 " allocated when training began (data, parameters, optimizer state); peak during training ",
                 mib(stats.peak_allocated), ", ",
                 mib(static_cast<double>(stats.peak_allocated) - static_cast<double>(allocated_before)),
                 " above it (gradients outside shared memory, activations, temporaries)");
  return out;
}

}  // namespace ringgrad::examples
