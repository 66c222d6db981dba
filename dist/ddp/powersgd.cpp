#include "dist/ddp/powersgd.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/ops.h"
#include "core/random.h"

namespace ringgrad::dist {

namespace {

// What a ring AllReduce of `bytes` sends from each rank: 2(N-1)/N of them.
WireBytes ring_payload(int64_t bytes, int N) {
  return {.payload = static_cast<uint64_t>(bytes) * 2 * static_cast<uint64_t>(N - 1) / static_cast<uint64_t>(N),
          .scales = 0};
}

// One gradient of the bucket: its (n, m) view and, when compressed, where its P and Q live.
struct Piece {
  std::string name;
  Tensor matrix;  // (n, m) view into the bucket's buffer
  int r = 0;      // 0: sent uncompressed
  int64_t flat_offset = 0, q_offset = 0;
};

bool all_finite(const Tensor& t) {
  const Tensor c = t.contiguous();
  const float* v = c.data<float>();
  return std::all_of(v, v + c.numel(), [](float x) { return std::isfinite(x); });
}

}  // namespace

void orthogonalize_columns(Tensor& matrix) {
  RG_CHECK(matrix.dim() == 2 && matrix.dtype() == DType::f32 && matrix.is_contiguous(), "dist.orthogonalize_columns",
           "needs a contiguous 2-D f32 matrix, got ", matrix.desc());
  const int64_t rows = matrix.shape()[0], cols = matrix.shape()[1];
  float* a = matrix.data<float>();
  for (int64_t i = 0; i < cols; ++i) {
    double norm2 = 0;
    for (int64_t k = 0; k < rows; ++k) norm2 += static_cast<double>(a[k * cols + i]) * a[k * cols + i];
    if (norm2 == 0) continue;  // a zero column stays zero (see the header)
    const auto inv = static_cast<float>(1 / std::sqrt(norm2));
    for (int64_t k = 0; k < rows; ++k) a[k * cols + i] *= inv;
    for (int64_t j = i + 1; j < cols; ++j) {
      double dot = 0;
      for (int64_t k = 0; k < rows; ++k) dot += static_cast<double>(a[k * cols + i]) * a[k * cols + j];
      for (int64_t k = 0; k < rows; ++k) a[k * cols + j] -= static_cast<float>(dot) * a[k * cols + i];
    }
  }
}

PowerSgdState::PowerSgdState(PowerSgdOptions o) : options(o) {
  RG_CHECK(o.rank >= 1 && o.start_iteration >= 0 && o.min_compression_rate >= 0, "dist.PowerSgdState",
           "needs rank >= 1, start_iteration >= 0 and min_compression_rate >= 0, got rank ", o.rank,
           ", start_iteration ", o.start_iteration, ", min_compression_rate ", o.min_compression_rate);
}

int64_t PowerSgdState::state_bytes() const {
  int64_t bytes = residuals.bytes();
  for (const auto& [name, q] : qs_) bytes += static_cast<int64_t>(q.nbytes());
  return bytes;
}

StateDict PowerSgdState::local_state() const {
  StateDict out = residuals.state("residual.");
  for (const auto& [name, q] : qs_) out.emplace_back("q." + name, q.clone());
  out.emplace_back("iteration", full({}, static_cast<double>(iteration_), {.dtype = DType::i64}));
  out.emplace_back("qs_made", full({}, static_cast<double>(qs_made_), {.dtype = DType::i64}));
  return out;
}

void PowerSgdState::load_local_state(const StateDict& state) {
  const char* who = "dist.PowerSgdState";
  const int64_t iteration = state_int(state, "iteration", who), qs_made = state_int(state, "qs_made", who);
  std::vector<std::pair<std::string, Tensor>> qs;
  for (const auto& [name, q] : with_prefix_removed(state, "q.")) {
    RG_CHECK(q.dtype() == DType::f32 && q.dim() == 2 && q.shape()[1] <= options.rank, who, "the kept Q of ", name,
             " must be (m, r <= ", options.rank, ") f32, got ", q.desc());
    qs.emplace_back(name, q.clone());
  }
  residuals.load(state, "residual.");
  qs_ = std::move(qs);
  iteration_ = iteration;
  qs_made_ = qs_made;
}

Tensor PowerSgdState::q_of(const std::string& parameter) const {
  for (const auto& [name, q] : qs_)
    if (name == parameter) return q;
  return Tensor();
}

Tensor PowerSgdState::q_for(const std::string& parameter, int64_t m, int r) {
  if (options.warm_start) {
    const Tensor kept = q_of(parameter);
    if (kept.defined() && kept.shape() == Shape{m, r}) return kept.clone();
  }
  Generator gen(options.random_seed + static_cast<uint64_t>(qs_made_++));  // the same sequence on every rank
  return randn({m, r}, gen);
}

HookWork PowerSgdState::reduce(ProcessGroup& group, GradBucket& bucket) {
  if (bucket.index == 0) ++iteration_;  // buckets launch in index order: bucket 0 begins a step
  Tensor buffer = bucket.buffer;
  RG_CHECK(buffer.dtype() == DType::f32 && buffer.device().is_cpu(), "dist.powersgd_hook",
           "compresses f32 CPU gradients, but bucket ", bucket.index, " is ", buffer.desc(), " (rank ", group.rank(),
           "/", group.size(), ")");
  RG_CHECK(bucket.parameter_shapes.size() == bucket.parameter_names.size(), "dist.powersgd_hook", "bucket ",
           bucket.index, " names ", bucket.parameter_names.size(), " parameters but gives ",
           bucket.parameter_shapes.size(), " shapes (rank ", group.rank(), "/", group.size(),
           "): PowerSGD needs each gradient's shape");
  const int N = group.size();
  ++calls;
  if (iteration_ < options.start_iteration) {
    sent += ring_payload(static_cast<int64_t>(buffer.nbytes()), N);
    return allreduce_hook(group, bucket);
  }
  Tensor residual, before;  // error feedback: this bucket's residual, and M + e as it went in
  if (options.error_feedback) {
    residual = residuals.for_bucket(bucket);
    buffer.add_(residual);
    before = buffer.clone();
  }
  // Which gradients are worth compressing, and where each one's numbers go: the uncompressed ones
  // and the Ps share one flat tensor (one AllReduce), the Qs another.
  auto pieces = std::make_shared<std::vector<Piece>>();
  int64_t flat_numel = 0, q_numel = 0, offset = 0;
  for (size_t k = 0; k < bucket.parameter_names.size(); ++k) {
    const Shape& shape = bucket.parameter_shapes.at(k);
    const int64_t numel = shape_numel(shape);
    const int64_t n = shape.empty() ? 1 : shape[0], m = n > 0 ? numel / n : 0;
    Piece piece{.name = bucket.parameter_names[k], .matrix = buffer.narrow(0, offset, numel).view({n, m})};
    const int r = static_cast<int>(std::min<int64_t>({n, m, options.rank}));
    const bool worth = shape.size() >= 2 &&
                       static_cast<double>(n * m) > static_cast<double>((n + m) * r) * options.min_compression_rate;
    numel_before += numel;
    if (worth) {
      piece.r = r;
      piece.flat_offset = flat_numel;
      piece.q_offset = q_numel;
      flat_numel += n * r;
      q_numel += m * r;
      numel_after += (n + m) * r;
    } else {
      piece.flat_offset = flat_numel;
      flat_numel += numel;
      numel_after += numel;
    }
    pieces->push_back(std::move(piece));
    offset += numel;
  }
  Tensor flat = zeros({flat_numel}), qs = zeros({q_numel});
  for (Piece& piece : *pieces) {
    const int64_t n = piece.matrix.shape()[0], m = piece.matrix.shape()[1];
    if (piece.r == 0) {
      flat.narrow(0, piece.flat_offset, n * m).copy_(piece.matrix.reshape({n * m}));
      continue;
    }
    Tensor q = q_for(piece.name, m, piece.r);  // (m, r)
    orthogonalize_columns(q);
    flat.narrow(0, piece.flat_offset, n * piece.r).view({n, piece.r}).copy_(mm(piece.matrix, q));  // P = M Q
  }
  sent += ring_payload(flat_numel * 4, N);
  sent += ring_payload(q_numel * 4, N);
  std::shared_ptr<Work> work = group.allreduce(flat, ReduceOp::sum);
  // Runs when DDP waits for this bucket: orthogonalize P, Q = Mᵀ P averaged, M̂ = P Qᵀ.
  auto then = [this, &group, pieces, flat, qs, buffer, residual, before, N]() mutable {
    for (Piece& piece : *pieces) {
      const int64_t n = piece.matrix.shape()[0], m = piece.matrix.shape()[1];
      if (piece.r == 0) {
        piece.matrix.copy_(flat.narrow(0, piece.flat_offset, n * m).view({n, m}) * (1.0 / N));
        continue;
      }
      Tensor p = flat.narrow(0, piece.flat_offset, n * piece.r).view({n, piece.r});
      orthogonalize_columns(p);
      qs.narrow(0, piece.q_offset, m * piece.r).view({m, piece.r}).copy_(mm(piece.matrix.t(), p));  // Q = Mᵀ P
    }
    if (qs.numel() > 0) group.allreduce(qs, ReduceOp::avg)->wait();
    for (Piece& piece : *pieces) {
      if (piece.r == 0) continue;
      const int64_t n = piece.matrix.shape()[0], m = piece.matrix.shape()[1];
      const Tensor p = flat.narrow(0, piece.flat_offset, n * piece.r).view({n, piece.r});
      const Tensor q = qs.narrow(0, piece.q_offset, m * piece.r).view({m, piece.r});
      piece.matrix.copy_(mm(p, q.t()));  // M̂ = P Qᵀ
      // A Q that is not finite (a gradient overflowed: the step will be skipped) is not kept: the
      // next step starts from a new random one rather than from NaN.
      if (!options.warm_start || !all_finite(q)) {
        qs_.erase(std::remove_if(qs_.begin(), qs_.end(), [&](const auto& e) { return e.first == piece.name; }),
                  qs_.end());
        continue;
      }
      auto it = std::find_if(qs_.begin(), qs_.end(), [&](const auto& e) { return e.first == piece.name; });
      if (it == qs_.end()) {
        qs_.emplace_back(piece.name, q.clone());
      } else {
        it->second = q.clone();
      }
    }
    if (residual.defined()) {
      residual.copy_(before - buffer);                        // e = (M + e) - M̂
      keep_finite(residual.data<float>(), residual.numel());  // an overflowed step leaves no NaN behind
    }
  };
  return {std::move(work), std::move(then)};
}

CommHook powersgd_hook(std::shared_ptr<PowerSgdState> state) {
  return [state](ProcessGroup& group, GradBucket& bucket) { return state->reduce(group, bucket); };
}

}  // namespace ringgrad::dist
