// GPU tensors through the MPI process groups and DDP, under mpirun -np 2 with both ranks
// sharing one GPU: the collectives stage CUDA tensors through host memory (Note [CUDA tensors through
// host staging] in dist/staging.h), so the results must be the CPU's exactly; DDP on the GPU must
// match one CPU process trained on the global batch.
//
// Without a CUDA device every rank exits with 77 before any collective (CTest: skipped).
#define DOCTEST_CONFIG_IMPLEMENT
#include <cuda_runtime.h>
#include <doctest/doctest.h>
#include <mpi.h>

#include <cstdio>

#include "ringgrad.h"

using namespace ringgrad;

namespace {

const Device kGpu = Device::cuda(0);
constexpr int64_t kPerRank = 4;

std::shared_ptr<dist::ProcessGroup> make_group(const std::string& backend) {
  return dist::new_group(backend, dist::GroupOptions{.timeout_seconds = 60});
}

// A tensor (n) whose element i on rank r is r + 1 + i, on the GPU.
Tensor rank_values(int64_t n, int rank) {
  std::vector<double> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(static_cast<double>(rank + 1 + i));
  return from_vector(v, {n}).to(kGpu);
}

}  // namespace

TEST_CASE("collectives on CUDA tensors give the closed-form results, on every MPI backend") {
  const int N = dist::world().size, r = dist::world().rank;
  for (const std::string backend : {"ring", "tree", "mpi", "auto"}) {
    CAPTURE(backend);
    auto pg = make_group(backend);
    for (int64_t n : {int64_t{1}, int64_t{1000}, int64_t{300001}}) {
      CAPTURE(n);
      Tensor t = rank_values(n, r);
      pg->allreduce(t)->wait();
      CHECK(t.device() == kGpu);
      const std::vector<double> sum = t.to(Device::cpu()).to_vector();
      bool ok = true;
      for (int64_t i = 0; i < n; ++i) ok &= sum[i] == static_cast<double>(N * (N + 1) / 2 + N * i);
      CHECK(ok);
    }
    Tensor b = rank_values(17, r);
    pg->broadcast(b, 1 % N)->wait();
    CHECK(b.to(Device::cpu()).to_vector() == rank_values(17, 1 % N).to(Device::cpu()).to_vector());
    Tensor gathered = zeros({N, 5}, {.device = kGpu});
    pg->allgather(gathered, rank_values(5, r))->wait();
    for (int k = 0; k < N; ++k)
      CHECK(gathered.select(0, k).to(Device::cpu()).to_vector() == rank_values(5, k).to(Device::cpu()).to_vector());
    Tensor part = zeros({3}, {.device = kGpu});
    pg->reduce_scatter(part, rank_values(3 * N, r))->wait();
    const std::vector<double> mine = part.to(Device::cpu()).to_vector();
    for (int64_t i = 0; i < 3; ++i) CHECK(mine[i] == static_cast<double>(N * (N + 1) / 2 + N * (r * 3 + i)));
  }
}

TEST_CASE("send / recv of CUDA tensors through host staging, on an MPI backend and on nccl's point-to-point") {
  const int N = dist::world().size, r = dist::world().rank;
  if (N < 2) return;
  std::vector<std::string> backends{"ring"};
  if (N <= cuda_device_count()) backends.push_back("nccl");  // its send / recv are MPI's too
  for (const std::string& backend : backends) {
    CAPTURE(backend);
    auto pg = make_group(backend);
    const Device mine = backend == "nccl" ? Device::cuda(dist::world().local_rank % cuda_device_count()) : kGpu;
    // A ring of messages: rank r sends its values to r + 1 and receives r - 1's, f32 and i64.
    for (const DType dt : {DType::f32, DType::i64}) {
      CAPTURE(dtype_name(dt));
      const Tensor out = rank_values(1001, r).to(dt).to(mine);
      Tensor in = zeros({1001}, {.dtype = dt, .device = mine});
      auto sent = pg->send(out, (r + 1) % N, 5);
      pg->recv(in, (r + N - 1) % N, 5)->wait();
      sent->wait();
      CHECK(in.device() == mine);
      CHECK(in.to(Device::cpu()).to_vector() == rank_values(1001, (r + N - 1) % N).to(Device::cpu()).to_vector());
    }
  }
}

TEST_CASE("nccl: collectives on this rank's GPU when each rank has one, else a clear error naming two ranks") {
  const int N = dist::world().size, r = dist::world().rank;
  if (N > cuda_device_count()) {  // e.g. 2 ranks, 1 GPU
    CHECK_THROWS_WITH(make_group("nccl"), doctest::Contains("ranks 0 and 1 would both drive one GPU"));
    return;
  }
  auto pg = make_group("nccl");
  const Device mine = Device::cuda(dist::world().local_rank % cuda_device_count());
  Tensor t = from_vector(std::vector<double>{1.0 + r, 2.0, 3.0 * r}, {3}).to(mine);
  pg->allreduce(t)->wait();
  CHECK(t.to(Device::cpu()).to_vector() ==
        std::vector<double>{N + N * (N - 1) / 2.0, 2.0 * N, 3.0 * N * (N - 1) / 2.0});
  Tensor avg = full({1000}, r + 1.0, {.device = mine});
  auto work = pg->allreduce(avg, dist::ReduceOp::avg);
  const Tensor later = mul(t, 2.0);  // a kernel the caller launches meanwhile on the default stream
  work->wait();
  CHECK(avg.to(Device::cpu()).to_vector() == std::vector<double>(1000, (N + 1) / 2.0));
  CHECK(later.to(Device::cpu()).to_vector() ==
        std::vector<double>{2.0 * (N + N * (N - 1) / 2.0), 4.0 * N, 6.0 * N * (N - 1) / 2.0});
  // A CPU tensor (DDP's own bookkeeping uses them) is staged through the group's GPU and back.
  Tensor on_host = full({2}, r + 1.0, {.dtype = DType::i64});
  pg->allreduce(on_host)->wait();
  CHECK(on_host.device().is_cpu());
  CHECK(on_host.to_vector() == std::vector<double>(2, N * (N + 1) / 2.0));
  // DDP on nccl: the same check as the MPI staging case below, one step.
  manual_seed(3);
  auto model = std::make_shared<nn::Linear>(8, 4);
  model->to(mine);
  dist::DistributedDataParallel ddp(model, pg);
  ddp(full({2, 8}, r + 1.0, {.device = mine})).sum().backward();
  // d(sum)/dW = sum over the batch of x: 2 (r + 1) per entry, averaged over ranks: N + 1.
  CHECK(model->weight.grad().to(Device::cpu()).to_vector() == std::vector<double>(32, N + 1.0));
}

TEST_CASE("nccl: collectives launched back to back finish in order; a block freed after an NCCL op is reused") {
  const int N = dist::world().size, r = dist::world().rank;
  if (N > cuda_device_count()) return;  // nccl needs one GPU per rank (the case above)
  auto pg = make_group("nccl");
  const Device mine = Device::cuda(dist::world().local_rank % cuda_device_count());
  // Eight allgathers (NCCL at any N; a world of one completes an allreduce alone) submitted without
  // waiting: the communication thread launches each behind the previous one (Note [Collectives
  // ordered on the device]), and kernels the host queues meanwhile must not disturb them.
  constexpr int64_t kElems = int64_t{1} << 20;
  std::vector<Tensor> outputs;
  std::vector<std::shared_ptr<dist::Work>> works;
  for (int k = 0; k < 8; ++k) {
    Tensor out = empty({N * kElems}, {.device = mine});
    works.push_back(pg->allgather(out, full({kElems}, 10.0 * k + r, {.device = mine})));
    outputs.push_back(out);
    const Tensor scribble = full({kElems}, -1.0, {.device = mine});  // the default stream, meanwhile
  }
  for (const auto& w : works) w->wait();
  for (int k = 0; k + 1 < 8; ++k) CHECK(works[k]->end_us() <= works[k + 1]->end_us());
  for (int k = 0; k < 8; ++k) {
    CAPTURE(k);
    const std::vector<double> got = outputs[k].to(Device::cpu()).to_vector();
    bool right = true;
    for (int j = 0; j < N; ++j)
      for (int64_t i = 0; i < kElems; i += 4099) right = right && got[j * kElems + i] == 10.0 * k + j;
    CHECK(right);
  }
  // The op's tensors were used on the communication stream (Note [Streams and block reuse]): freed
  // by the host, the block waits for that stream, then comes back to the cache -- not leaked.
  void* block = nullptr;
  {
    Tensor in = full({kElems}, 1.0, {.device = mine});
    block = in.storage()->data();
    Tensor out = empty({N * kElems}, {.device = mine});
    pg->allgather(out, in)->wait();
  }
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  // Two of that size: at N = 1 the output's block is of the same size class and may come first.
  const Tensor again = empty({kElems}, {.device = mine}), again2 = empty({kElems}, {.device = mine});
  CHECK((again.storage()->data() == block || again2.storage()->data() == block));
}

namespace {

// The global batch of a step, (N * kPerRank, 1, 8, 8) images and labels, on the CPU.
std::pair<Tensor, Tensor> global_batch(int step, int64_t count) {
  Generator gen(1000 + step);
  const Tensor x = randn({count, 1, 8, 8}, gen);
  std::vector<int64_t> labels;
  for (int64_t i = 0; i < count; ++i) labels.push_back((7 * i + step) % 10);
  return {x, from_vector(labels, {count}, {.dtype = DType::i64})};
}

std::shared_ptr<nn::Sequential> make_mlp(uint64_t seed) {
  manual_seed(seed);
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(64, 32), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(32, 10)});
}

// "" when every parameter of the GPU replica is on the GPU and within tolerance of the CPU
// reference's, else the first that is not.
std::string differs_from(nn::Module& gpu, nn::Module& cpu) {
  const auto pg = gpu.named_parameters(), pc = cpu.named_parameters();
  for (size_t i = 0; i < pc.size(); ++i) {
    if (pg[i].second.device() != kGpu) return pg[i].first + " left the GPU";
    if (!allclose(pg[i].second.to(Device::cpu()), pc[i].second, 1e-4, 1e-5)) return pg[i].first + " differs";
  }
  return "";
}

}  // namespace

// Every MPI backend stages the GPU's buckets through the host; the first broadcast of the parameters
// into tensors that require grad is what failed on the first GPU run (Staging::staged).
TEST_CASE("DDP on the GPU == one CPU process on the global batch (MLP, SGD, 3 steps, every MPI backend)") {
  const int N = dist::world().size, r = dist::world().rank;
  for (const std::string backend : {"ring", "mpi", "tree", "auto", "hierarchical"}) {
    CAPTURE(backend);
    auto reference = make_mlp(7);
    auto replica = make_mlp(r == 0 ? 7 : 99 + r);  // DDP must broadcast rank 0's parameters
    replica->to(kGpu);
    dist::DistributedDataParallel ddp(replica, make_group(backend), {.bucket_cap_mb = 0.004, .first_bucket_mb = 0.001});
    optim::SGD ref_opt(reference->parameters(), {.lr = 0.1, .momentum = 0.9});
    optim::SGD opt(replica->parameters(), {.lr = 0.1, .momentum = 0.9});
    for (int step = 0; step < 3; ++step) {
      CAPTURE(step);
      const auto [x, y] = global_batch(step, N * kPerRank);
      ref_opt.zero_grad();
      cross_entropy((*reference)(x), y).backward();
      ref_opt.step();
      opt.zero_grad();
      const Tensor mx = x.narrow(0, r * kPerRank, kPerRank).contiguous().to(kGpu);
      const Tensor my = y.narrow(0, r * kPerRank, kPerRank).contiguous().to(kGpu);
      cross_entropy(ddp(mx), my).backward();
      opt.step();
      CHECK(differs_from(*replica, *reference) == "");
    }
  }
}

// Two micro-batches per step, the first under no_sync, then ZeRO stages 1 and 2 over Adam: the
// same result as one CPU process on the step's whole batch.
TEST_CASE("no_sync and ZeRO stages 1 and 2 on the GPU == one CPU process (MLP, Adam, 3 steps)") {
  const int N = dist::world().size, r = dist::world().rank;
  for (int stage : {0, 1, 2}) {
    CAPTURE(stage);
    auto reference = make_mlp(7);
    auto replica = make_mlp(7);
    replica->to(kGpu);
    dist::DistributedDataParallel ddp(replica, make_group("ring"), {.bucket_cap_mb = 0.004, .first_bucket_mb = 0.001});
    optim::Adam ref_opt(reference->parameters(), {.lr = 1e-2});
    std::unique_ptr<optim::Optimizer> opt;
    if (stage == 0) opt = std::make_unique<optim::Adam>(replica->parameters(), optim::AdamOptions{.lr = 1e-2});
    else opt = dist::ZeroOptimizer::over<optim::Adam>(ddp, optim::AdamOptions{.lr = 1e-2}, {.stage = stage});
    for (int step = 0; step < 3; ++step) {
      CAPTURE(step);
      const auto [x0, y0] = global_batch(10 * step, N * kPerRank);
      const auto [x1, y1] = global_batch(10 * step + 1, N * kPerRank);
      ref_opt.zero_grad();
      (cross_entropy((*reference)(cat({x0, x1}, 0)), cat({y0, y1}, 0))).backward();
      ref_opt.step();
      opt->zero_grad();
      {
        auto guard = ddp.no_sync();
        (cross_entropy(ddp(x0.narrow(0, r * kPerRank, kPerRank).contiguous().to(kGpu)),
                       y0.narrow(0, r * kPerRank, kPerRank).contiguous().to(kGpu)) *
         0.5)
            .backward();
      }
      (cross_entropy(ddp(x1.narrow(0, r * kPerRank, kPerRank).contiguous().to(kGpu)),
                     y1.narrow(0, r * kPerRank, kPerRank).contiguous().to(kGpu)) *
       0.5)
          .backward();
      opt->step();
      CHECK(differs_from(*replica, *reference) == "");
    }
  }
}

int main(int argc, char** argv) {
  if (!cuda_compiled() || cuda_device_count() == 0) {
    std::printf("skipped: no CUDA device\n");
    return 77;  // before dist::init: every rank decides alike, no collective is left waiting
  }
  const dist::World world = dist::init(&argc, &argv);
  doctest::Context context(argc, argv);
  if (world.rank != 0) context.setOption("no-version", true);
  int rc = context.run();
  int worst = rc;
  MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  dist::finalize();
  return context.shouldExit() ? rc : worst;
}
