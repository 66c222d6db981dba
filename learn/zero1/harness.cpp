// The harness of the ZeRO-1 exercise. Each rank trains a replica on its N-th of every global batch
// with your Zero1Adam; one process trains on the whole batch with optim::Adam. After 10 steps they
// must agree (to rounding), while each rank holds 1/N of Adam's 8 bytes per parameter of moments.
#include <mpi.h>

#include <cmath>
#include <cstdio>

#include "dist/init.h"
#include "examples/common/command_line.h"
#include "learn/zero1/zero1.h"
#include "nn/nn.h"
#include "optim/optim.h"

namespace rg = ringgrad;

namespace {

constexpr int64_t kPerRank = 4;

std::shared_ptr<rg::nn::Module> make_model() {
  rg::manual_seed(5);
  return std::make_shared<rg::nn::Sequential>(
      std::initializer_list<std::shared_ptr<rg::nn::Module>>{std::make_shared<rg::nn::Linear>(10, 17),
                                                             std::make_shared<rg::nn::ReLU>(),
                                                             std::make_shared<rg::nn::Linear>(17, 3)});
}

struct Batch {
  rg::Tensor x, y;
};
Batch global_batch(int step, int N) {
  rg::Generator gen(300 + step);
  const rg::Tensor x = rg::randn({N * kPerRank, 10}, gen);
  std::vector<int64_t> labels;
  for (int64_t i = 0; i < N * kPerRank; ++i) labels.push_back((i * 5 + step) % 3);
  return {x, rg::from_vector(labels, {N * kPerRank}, {.dtype = rg::DType::i64})};
}

}  // namespace

int main(int argc, char** argv) {
  if (const auto code = ringgrad::flags::parse_no_flags(
          argc, argv, "The ZeRO-1 exercise: your Zero1Adam against one process's Adam (run under mpirun)"))
    return *code;
  const rg::dist::World world = rg::dist::init(&argc, &argv);
  return rg::dist::run_or_abort([&] {
    const int N = world.size, r = world.rank;
    auto reference = make_model(), model = make_model();
    rg::optim::Adam ref_opt(reference->parameters(), {.lr = 1e-2});
    auto group = rg::dist::new_group("ring");
    learn::Zero1Adam opt(model->parameters(), *group, 1e-2);
    for (int step = 0; step < 10; ++step) {
      const Batch b = global_batch(step, N);
      ref_opt.zero_grad();
      rg::cross_entropy((*reference)(b.x), b.y).backward();
      ref_opt.step();
      for (rg::Tensor& p : model->parameters()) p.zero_grad();
      rg::cross_entropy((*model)(b.x.narrow(0, r * kPerRank, kPerRank)), b.y.narrow(0, r * kPerRank, kPerRank))
          .backward();
      opt.step();
    }
    double diff = 0, norm = 0;
    int64_t psi = 0;
    const auto pa = reference->parameters(), pb = model->parameters();
    for (size_t i = 0; i < pa.size(); ++i) {
      const rg::Tensor d = pa[i] - pb[i];
      diff += (d * d).sum().item();
      norm += (pa[i] * pa[i]).sum().item();
      psi += pa[i].numel();
    }
    const double distance = std::sqrt(diff / norm);
    const size_t full = ref_opt.state_bytes(), mine = opt.state_bytes();
    std::printf(
        "rank %d: distance from one process with optim::Adam %.2e; Adam state %zu bytes here, %zu in a "
        "whole replica (%.2f and %.2f bytes per parameter, Ψ = %lld)\n",
        r, distance, mine, full, static_cast<double>(mine) / psi, static_cast<double>(full) / psi,
        static_cast<long long>(psi));
    // 8 bytes of moments per owned element; the padding adds at most N - 1 elements in all.
    const size_t owned = static_cast<size_t>((psi + N - 1) / N);
    bool ok = distance < 1e-5 && mine == 8 * owned;
    if (!ok)
      std::printf("rank %d: FAIL: %s\n", r,
                  distance >= 1e-5 ? "the parameters differ from one process's Adam"
                                   : "each rank should hold two f32 moments for its ceil(Ψ / N) elements");
    int all_ok = ok;
    MPI_Allreduce(MPI_IN_PLACE, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (all_ok && r == 0) std::printf("OK: the same training as Adam, with 1/%d of its state on each rank\n", N);
    return all_ok ? 0 : 1;
  });
}
