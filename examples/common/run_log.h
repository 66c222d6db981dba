// --log-dir: a run's curves as TensorBoard event files (core/summary_writer.h), the same tags in
// both examples:
//   train/loss  train/lr  train/samples_per_s or train/tokens_per_s  train/step_ms  train/loss_scale
//   comm/comm_ms  comm/exposed_ms  comm/overlap_percent   (DDP's last step, dist/ddp/options.h)
//   memory/peak_mib                                         (the allocator's peak on the device)
//   eval/test_accuracy (mnist)  val/loss, samples (gpt_mini: the validation loss, sampled text)
// Rank 0 writes by default; --log-all-ranks gives every rank its own file (suffix ".rank<r>"), for
// the communication figures, which differ by rank.
#pragma once

#include <memory>
#include <string>

#include <ringgrad.h>

namespace ringgrad::examples {

class RunLog {
 public:
  RunLog(const std::string& dir, int rank, bool all_ranks) {
    if (dir.empty() || (rank != 0 && !all_ranks)) return;
    writer_ = std::make_unique<SummaryWriter>(dir, all_ranks ? ".rank" + std::to_string(rank) : "");
  }
  explicit operator bool() const { return writer_ != nullptr; }

  void scalar(const std::string& tag, double value, int64_t step) {
    if (writer_) writer_->add_scalar(tag, value, step);
  }
  void text(const std::string& tag, const std::string& value, int64_t step) {
    if (writer_) writer_->add_text(tag, value, step);
  }
  // The training figures of one logging point: loss, learning rate, throughput (`rate_tag` per
  // second), the mean step time since the last point, DDP's last step, the memory peak, and the
  // loss scale when the scaler is on.
  void training_step(int64_t step, double loss, double lr, const std::string& rate_tag, double rate, double step_ms,
                     const dist::DDPStats& ddp, Device device, const optim::GradScaler& scaler) {
    if (!writer_) return;
    scalar("train/loss", loss, step);
    scalar("train/lr", lr, step);
    scalar("train/" + rate_tag, rate, step);
    scalar("train/step_ms", step_ms, step);
    if (scaler.is_enabled()) scalar("train/loss_scale", scaler.get_scale(), step);
    if (ddp.steps > 0) {
      scalar("comm/comm_ms", ddp.last.comm_ms, step);
      scalar("comm/exposed_ms", ddp.last.exposed_comm_ms, step);
      scalar("comm/overlap_percent", ddp.last.overlap_percent(), step);
    }
    scalar("memory/peak_mib", static_cast<double>(memory_stats(device).peak_allocated) / (1 << 20), step);
  }

 private:
  std::unique_ptr<SummaryWriter> writer_;
};

}  // namespace ringgrad::examples
