// softmax / log_softmax and the fused cross-entropy: argument checks, dense rows in the compute dtype
// (f16/bf16 inputs are computed in f32 and rounded once), and the row kernels of the tensors' device
// through the backend seam (core/cpu/rows.cpp, core/cuda/rows.cu), which see the same dense rows in
// the same compute dtype.
//
// Stability: every row is shifted by its maximum before exponentiating, so exp never overflows;
// log_softmax = (x - max) - log(sum(exp(x - max))) never takes the log of a rounded-to-zero softmax.
#include "core/native/backend.h"
#include "core/native/native.h"
#include "core/profiler.h"

namespace ringgrad::native {
namespace {

// The compute dtype: f64 stays f64, everything else runs in f32.
DType compute_dtype(DType t) { return t == DType::f64 ? DType::f64 : DType::f32; }

void check_floating(const char* op, const Tensor& a) {
  RG_CHECK(a.defined() && is_floating(a.dtype()), op, "needs a floating-point tensor, got ", a.desc());
}

}  // namespace

Tensor softmax(const Tensor& a, int64_t dim, bool log) {
  const char* op = log ? "log_softmax" : "softmax";
  check_floating(op, a);
  if (a.dim() == 0) return view(softmax(unsqueeze(a, 0), 0, log), {});
  dim = wrap_dim(dim, a.dim(), op);
  profiler::OpScope record(op, 0, 2 * static_cast<double>(a.nbytes()));  // a in, the result out
  // Move `dim` last, compute over dense rows, move it back.
  const DType ct = compute_dtype(a.dtype());
  Tensor x = contiguous(cast(transpose(a, dim, -1), ct));
  Tensor y = empty(x.shape(), ct, a.device());
  const int64_t cols = x.size(-1), rows = cols ? x.numel() / cols : 0;
  backend_softmax_rows(a.device(), ct, x.raw_data(), y.raw_data(), rows, cols, log);
  return contiguous(cast(transpose(y, dim, -1), a.dtype()));
}

Tensor cross_entropy(const Tensor& logits, const Tensor& target, int64_t ignore_index, Tensor* count) {
  check_floating("cross_entropy", logits);
  RG_CHECK(logits.dim() == 2, "cross_entropy", "logits must be (N, C), got ", logits.desc());
  RG_CHECK(target.defined() && target.dtype() == DType::i64 && target.dim() == 1 && target.size(0) == logits.size(0),
           "cross_entropy", "target must be (N,) i64 class indices with N = ", logits.size(0), ", got ", target.desc(),
           " for logits ", logits.desc());
  RG_CHECK(target.device() == logits.device(), "cross_entropy", "logits ", logits.desc(), " and target ", target.desc(),
           " are on different devices");
  const int64_t n = logits.size(0), c = logits.size(1);
  profiler::OpScope record("cross_entropy", 0, static_cast<double>(logits.nbytes()));  // its log_softmax inside
  const Tensor t = contiguous(target);
  // On the CPU the targets are checked here; a GPU's kernel checks its own (Note [Device-side index
  // checks]): copying them to the host would wait for the forward's kernels, every step.
  if (backend_checks_indices_on_host(t.device())) {
    const int64_t* tp = t.data<int64_t>();
    for (int64_t i = 0; i < n; ++i)
      RG_CHECK(tp[i] == ignore_index || (tp[i] >= 0 && tp[i] < c), "cross_entropy", "target[", i, "] = ", tp[i],
               " is not a class index in [0, ", c, ") (nor ignore_index ", ignore_index, ")");
  }
  Tensor logp = softmax(cast(logits, compute_dtype(logits.dtype())), 1, /*log=*/true);
  // The mean and the count of counted rows stay on the device: no value comes back to the host.
  Tensor loss = empty({}, DType::f64, logits.device());
  Tensor counted = empty({}, DType::i64, logits.device());
  backend_nll_mean(logits.device(), logp.dtype(), logp.raw_data(), t.data<int64_t>(), n, c, ignore_index,
                   loss.data<double>(), counted.data<int64_t>());
  if (count) *count = counted;
  return cast(loss, logits.dtype());
}

// d/dlogits of mean_i(-log softmax(x_i)[t_i]) = (softmax(x_i) - onehot(t_i)) / count, 0 on ignored rows.
// grad and count stay on the device (the kernel divides).
Tensor cross_entropy_backward(const Tensor& grad, const Tensor& logits, const Tensor& target, int64_t ignore_index,
                              const Tensor& count) {
  const int64_t n = logits.size(0), c = logits.size(1);
  profiler::OpScope record("cross_entropy_backward", 0, 2 * static_cast<double>(logits.nbytes()));
  const DType ct = compute_dtype(logits.dtype());
  Tensor p = softmax(cast(logits, ct), 1, /*log=*/false);  // dense (N, C)
  const Tensor g = contiguous(cast(grad, ct));             // f16 / bf16 / f32 values are exact in f32
  const Tensor t = contiguous(target);
  backend_softmax_minus_one_hot(p.device(), ct, p.raw_data(), t.data<int64_t>(), n, c, ignore_index, g.raw_data(),
                                count.data<int64_t>());
  return cast(p, logits.dtype());
}

}  // namespace ringgrad::native
