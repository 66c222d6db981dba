// DistributedDataParallel against its reference: one process training on the whole global batch.
//
// Every rank builds the same data (same seed) and a reference model trained locally on all N·B
// examples; the DDP model (rank r initialised differently unless r == 0, to prove the broadcast)
// trains on examples [r B, (r + 1) B). After each step the two must agree.
#include <unistd.h>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "autograd/engine.h"
#include "core/fusion.h"
#include "core/profiler.h"
#include "dist/ddp/ddp.h"
#include "dist/ddp/powersgd.h"
#include "dist_test_util.h"
#include "nn/nn.h"
#include "optim/optim.h"

namespace nn = ringgrad::nn;
namespace optim = ringgrad::optim;

namespace {

constexpr int64_t kPerRank = 4;  // B

std::shared_ptr<nn::Module> make_mlp(uint64_t seed, int64_t hidden = 32) {
  rg::manual_seed(seed);
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(64, hidden), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(hidden, 10)});
}

std::shared_ptr<nn::Module> make_cnn(uint64_t seed) {
  rg::manual_seed(seed);
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Conv2d>(1, 4, 3, nn::Conv2dOptions{.padding = 1}), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::MaxPool2d>(2), std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(64, 10)});
}

// Registers fc2 before fc1 but runs fc1 first: backward's order differs from reverse registration.
struct Reversed : nn::Module {
  std::shared_ptr<nn::Linear> fc2, fc1;
  explicit Reversed(uint64_t seed) {
    rg::manual_seed(seed);
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(32, 10));
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(64, 32));
  }
  rg::Tensor forward(const rg::Tensor& x) override { return (*fc2)(rg::relu((*fc1)(x.reshape({x.shape()[0], 64})))); }
};

// A parameter that forward never uses.
struct WithUnused : nn::Module {
  std::shared_ptr<nn::Linear> fc, unused;
  explicit WithUnused(uint64_t seed) {
    rg::manual_seed(seed);
    fc = register_module("fc", std::make_shared<nn::Linear>(64, 10));
    unused = register_module("unused", std::make_shared<nn::Linear>(64, 3));
  }
  rg::Tensor forward(const rg::Tensor& x) override { return (*fc)(x.reshape({x.shape()[0], 64})); }
};

struct Batch {
  rg::Tensor x, y;
};

// The global batch of step `step`: (N·B, 1, 8, 8) images and labels, identical on every rank.
Batch global_batch(int step, int64_t count) {
  rg::Generator gen(1000 + step);
  std::vector<int64_t> labels;
  for (int64_t i = 0; i < count; ++i) labels.push_back((7 * i + step) % 10);
  return {rg::randn({count, 1, 8, 8}, gen), rg::from_vector(labels, {count}, {.dtype = rg::DType::i64})};
}

Batch my_shard(const Batch& b) {
  const int r = dist::world().rank;
  return {b.x.narrow(0, r * kPerRank, kPerRank).contiguous(), b.y.narrow(0, r * kPerRank, kPerRank).contiguous()};
}

// "ring" reduces the buckets over messages; "auto" on one machine puts them in shared memory and
// sums them in place (Note [Shared gradient buffers] in dist/shm/reduction_buffer.h).
std::shared_ptr<dist::ProcessGroup> group(const std::string& backend = "ring") {
  dist::GroupOptions options = test_options();
  if (backend == "auto") options.shared_memory = true;  // whatever RINGGRAD_DIST_SHM says
  return dist::new_group(backend, options);
}

std::unique_ptr<optim::Optimizer> make_opt(const std::string& name, std::vector<rg::Tensor> params) {
  if (name == "sgd") return std::make_unique<optim::SGD>(params, optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
  return std::make_unique<optim::Adam>(params, optim::AdamOptions{.lr = 1e-3});
}

// "" when every parameter of a and b agrees within tolerance, else the first difference.
std::string params_differ(nn::Module& a, nn::Module& b, double rtol, double atol) {
  auto pa = a.named_parameters(), pb = b.named_parameters();
  for (size_t i = 0; i < pa.size(); ++i)
    if (!rg::allclose(pa[i].second, pb[i].second, rtol, atol))
      return rg::str_cat("rank ", dist::world().rank, ": parameter ", pa[i].first, " differs");
  return "";
}

}  // namespace

TEST_CASE("ddp: N ranks x batch B == one process x batch N*B (MLP and CNN, SGD and Adam, 5 steps)") {
  const int N = dist::world().size, r = dist::world().rank;
  for (const std::string backend : {"ring", "auto"})
    for (const std::string model : {"mlp", "cnn"})
      for (const std::string opt_name : {"sgd", "adam"}) {
        CAPTURE(backend);
        CAPTURE(model);
        CAPTURE(opt_name);
        auto make = [&](uint64_t seed) { return model == "mlp" ? make_mlp(seed) : make_cnn(seed); };
        auto reference = make(7);
        auto replica = make(r == 0 ? 7 : 99 + r);  // other ranks start elsewhere: DDP must broadcast
        auto pg = group(backend);
        dist::DistributedDataParallel ddp(replica, pg, {.bucket_cap_mb = 0.004, .first_bucket_mb = 0.001});
        CHECK(params_differ(*reference, *replica, 0, 0) == "");  // broadcast from rank 0
        CHECK(ddp.buckets().size() >= 2);                        // several buckets, so several launches
        const bool in_place = backend == "auto" && N > 1 && !host_staging();
        for (const dist::BucketInfo& b : ddp.buckets()) CHECK(b.in_shared_memory == in_place);
        auto ref_opt = make_opt(opt_name, reference->parameters());
        auto opt = make_opt(opt_name, replica->parameters());
        for (int step = 0; step < 5; ++step) {
          const Batch global = global_batch(step, N * kPerRank), mine = my_shard(global);
          ref_opt->zero_grad();
          rg::cross_entropy((*reference)(global.x), global.y).backward();
          ref_opt->step();
          opt->zero_grad();
          rg::cross_entropy(ddp(mine.x), mine.y).backward();
          // The gradients are bucket views; on "auto" those are shared memory, reduced in place.
          CHECK(pg->reduces_in_place(replica->parameters()[0].grad()) == in_place);
          opt->step();
          CAPTURE(step);
          CHECK(params_differ(*reference, *replica, 1e-5, 1e-6) == "");
        }
        CHECK(ddp.stats().steps == 5);
      }
}

TEST_CASE("ddp: after zero_grad(set_to_none) linear weight gradients are written into their bucket, not copied") {
  // Note [Gradient destinations]: a hook registered before DDP's runs first and sees .grad as
  // AccumulateGrad left it. Were it copied into the bucket afterwards, its memory would change.
  auto model = make_mlp(7);
  std::map<std::string, const rg::Storage*> seen;
  for (auto& [name, p] : model->named_parameters())
    p.register_post_accumulate_grad_hook(
        [&seen, name = name](rg::Tensor& t) { seen[name] = t.grad().storage().get(); });
  dist::DistributedDataParallel ddp(model, group(), {});
  optim::SGD opt(model->parameters(), {.lr = 0.1});
  for (int step = 0; step < 3; ++step) {
    const Batch mine = my_shard(global_batch(step, dist::world().size * kPerRank));
    opt.zero_grad();
    rg::cross_entropy(ddp(mine.x), mine.y).backward();
    opt.step();
    if (step == 0) continue;  // the first backward ends by rebuilding the buckets: new buffers
    for (auto& [parameter_name, p] : model->named_parameters()) {
      const std::string& name = parameter_name;  // CAPTURE cannot name a structured binding (clang 14)
      if (name.find("weight") == std::string::npos) continue;
      CAPTURE(step);
      CAPTURE(name);
      CHECK(seen[name] == p.grad().storage().get());
      CHECK(p.grad().storage() == model->parameters().front().grad().storage());  // one bucket (default cap)
    }
  }
  // DDP's destructor removes the destinations, also from a parameter frozen meanwhile.
  model->named_parameters().front().second.requires_grad_(false);
}

TEST_CASE("ddp: K micro-batches under no_sync == one step with a K x batch, one reduction per bucket") {
  const int N = dist::world().size, r = dist::world().rank;
  const int K = 3;
  for (const std::string backend : {"ring", "auto"}) {
    CAPTURE(backend);
    auto reference = make_mlp(5);
    auto replica = make_mlp(r == 0 ? 5 : 50 + r);
    auto pg = group(backend);
    dist::DistributedDataParallel ddp(replica, pg, {.bucket_cap_mb = 0.004, .first_bucket_mb = 0.001});
    const int64_t buckets = static_cast<int64_t>(ddp.buckets().size());
    optim::SGD ref_opt(reference->parameters(), {.lr = 0.1});
    optim::SGD opt(replica->parameters(), {.lr = 0.1});
    for (int step = 0; step < 2; ++step) {
      // Reference: one batch of K·N·B examples.
      std::vector<Batch> micro;
      for (int k = 0; k < K; ++k) micro.push_back(global_batch(10 * step + k, N * kPerRank));
      std::vector<rg::Tensor> xs, ys;
      for (auto& b : micro) {
        xs.push_back(b.x);
        ys.push_back(b.y);
      }
      ref_opt.zero_grad();
      rg::cross_entropy((*reference)(rg::cat(xs, 0)), rg::cat(ys, 0)).backward();
      ref_opt.step();

      opt.zero_grad();
      const uint64_t ops_before = pg->stats().ops;
      for (int k = 0; k < K; ++k) {
        const Batch mine = my_shard(micro[k]);
        // The last micro-batch's forward runs inside the guard too: only where backward runs matters.
        rg::Tensor loss;
        {
          auto guard = ddp.no_sync();
          loss = rg::cross_entropy(ddp(mine.x), mine.y) * (1.0 / K);
          if (k < K - 1) loss.backward();
        }
        if (k == K - 1) loss.backward();
      }
      // One AllReduce per bucket -- plus, after the very first synchronising backward, the one
      // broadcast that agrees on the rebuilt bucket order, and on "auto" the two small collectives
      // that map the rebuilt buckets' shared buffer (N > 1; none under host staging, which maps none).
      const int rebuild_ops = step > 0 ? 0 : 1 + (backend == "auto" && N > 1 && !host_staging() ? 2 : 0);
      CHECK(pg->stats().ops - ops_before == static_cast<uint64_t>(buckets + rebuild_ops));
      CHECK(ddp.stats().bucket_reductions == (step + 1) * buckets);
      opt.step();
      CHECK(params_differ(*reference, *replica, 1e-5, 1e-6) == "");
    }
  }
}

TEST_CASE("ddp: a CNN with BatchNorm2d and global average pooling == one process averaging each rank's loss") {
  // Each rank normalises with its own batch (no SyncBatchNorm), so the reference is one process that
  // runs every rank's shard through the same weights and averages the gradients.
  const int N = dist::world().size, r = dist::world().rank;
  auto make = [](uint64_t seed) {
    rg::manual_seed(seed);
    return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
        std::make_shared<nn::Conv2d>(1, 4, 3, nn::Conv2dOptions{.padding = 1}), std::make_shared<nn::BatchNorm2d>(4),
        std::make_shared<nn::ReLU>(), std::make_shared<nn::AdaptiveAvgPool2d>(1), std::make_shared<nn::Flatten>(),
        std::make_shared<nn::Linear>(4, 10)});
  };
  auto reference = make(8);
  auto replica = make(r == 0 ? 8 : 80 + r);
  dist::DistributedDataParallel ddp(replica, group());
  optim::SGD ref_opt(reference->parameters(), {.lr = 0.1});
  optim::SGD opt(replica->parameters(), {.lr = 0.1});
  for (int step = 0; step < 3; ++step) {
    const Batch all = global_batch(step, N * kPerRank);
    ref_opt.zero_grad();
    for (int q = 0; q < N; ++q) {
      const rg::Tensor x = all.x.narrow(0, q * kPerRank, kPerRank), y = all.y.narrow(0, q * kPerRank, kPerRank);
      (rg::cross_entropy((*reference)(x), y) * (1.0 / N)).backward();
    }
    ref_opt.step();
    opt.zero_grad();
    const Batch mine = my_shard(all);
    rg::cross_entropy(ddp(mine.x), mine.y).backward();
    opt.step();
    CHECK(params_differ(*reference, *replica, 1e-5, 1e-6) == "");
  }
  // The next forward starts from rank 0's running statistics on every rank (DDP broadcasts buffers).
  replica->eval();
  ddp(my_shard(global_batch(9, N * kPerRank)).x);
  const rg::Tensor mean = replica->named_buffers()[0].second;
  rg::Tensor all_means = rg::zeros({N, mean.numel()});
  ddp.group().allgather(all_means, mean)->wait();
  for (int q = 1; q < N; ++q) CHECK(rg::equal(all_means.select(0, q), all_means.select(0, 0)));
}

TEST_CASE("ddp: forward_as runs a forward of another signature, with the buffers broadcast first") {
  // A model whose forward takes two tensors: y = fc(x) * scale, scale a per-column mask.
  struct TwoInputs : nn::Module {
    TwoInputs() : Module("TwoInputs") {
      fc = register_module("fc", std::make_shared<nn::Linear>(8, 4));
      seen = register_buffer("seen", rg::zeros({1}));
    }
    rg::Tensor forward(const rg::Tensor& x, const rg::Tensor& scale) {
      {
        rg::NoGradGuard no_grad;
        seen.copy_(seen + 1.0);
      }
      return fc->forward(x) * scale;
    }
    std::shared_ptr<nn::Linear> fc;
    rg::Tensor seen;
  };
  const int r = dist::world().rank;
  rg::manual_seed(3);
  auto model = std::make_shared<TwoInputs>();
  dist::DistributedDataParallel ddp(model, group(), {.broadcast_buffers = true});
  if (r != 0) {  // a different buffer value off rank 0: the forward's broadcast must overwrite it
    rg::NoGradGuard no_grad;
    model->seen.copy_(rg::full({1}, 10.0 + r));
  }
  const rg::Tensor x = rg::ones({2, 8}), scale = rg::from_vector(std::vector<double>{1, 0, 2, 0}, {1, 4});
  const rg::Tensor y = ddp.forward_as<TwoInputs>(x, scale);
  CHECK(rg::equal(y, model->fc->forward(x) * scale));
  CHECK(model->seen.item() == 1.0);  // rank 0's 0, broadcast, then + 1 on every rank
  rg::cross_entropy(y, rg::zeros({2}, {.dtype = rg::DType::i64})).backward();  // reduced like any forward
  CHECK(ddp.stats().bucket_reductions >= 1);
  CHECK_THROWS_WITH_AS(ddp.forward_as<nn::Linear>(x), doctest::Contains("wrapped module is a TwoInputs"), rg::Error);
}

TEST_CASE("dropout: each rank draws its own masks by default, identical ones when asked") {
  const int N = dist::world().size;
  auto pg = group();
  nn::Dropout drop(0.5);
  const rg::Tensor x = rg::ones({1024});
  auto masks_of_every_rank = [&] {
    rg::manual_seed(3);  // the same seed on every rank, as a training script sets it
    rg::Tensor all = rg::zeros({N, 1024});
    pg->allgather(all, drop(x))->wait();
    return all;
  };
  rg::Tensor per_rank = masks_of_every_rank();
  for (int r = 1; r < N; ++r) CHECK_FALSE(rg::equal(per_rank.select(0, r), per_rank.select(0, 0)));
  rg::set_dropout_streams(rg::DropoutStreams::same_on_every_rank);
  rg::Tensor same = masks_of_every_rank();
  rg::set_dropout_streams(rg::DropoutStreams::per_rank);
  for (int r = 1; r < N; ++r) CHECK(rg::equal(same.select(0, r), same.select(0, 0)));
}

TEST_CASE("ddp: an optimizer step after a backward under no_sync is refused, and nothing changes") {
  const int N = dist::world().size;
  auto replica = make_mlp(5);
  auto other = make_mlp(6);  // not wrapped: its optimizer is never refused
  dist::DistributedDataParallel ddp(replica, group());
  optim::SGD opt(replica->parameters(), {.lr = 0.1});
  optim::SGD other_opt(other->parameters(), {.lr = 0.1});
  const Batch mine = my_shard(global_batch(0, N * kPerRank));
  const rg::Tensor before = replica->parameters()[0].clone();
  for (int k = 0; k < 2; ++k) {  // no_sync around every micro-batch, the last included
    auto guard = ddp.no_sync();
    rg::cross_entropy(ddp(mine.x), mine.y).backward();
  }
  CHECK_THROWS_WITH_AS(opt.step(), doctest::Contains("after a backward that did not synchronise"), rg::Error);
  CHECK(rg::equal(replica->parameters()[0], before));
  rg::cross_entropy((*other)(mine.x), mine.y).backward();
  other_opt.step();
  // A synchronising backward reduces the accumulated sums; the step then goes ahead.
  rg::cross_entropy(ddp(mine.x), mine.y).backward();
  opt.step();
  CHECK_FALSE(rg::equal(replica->parameters()[0], before));
}

TEST_CASE("ddp: buckets are rebuilt from the observed gradient order, and the result does not change") {
  const int r = dist::world().rank, N = dist::world().size;
  auto a = std::make_shared<Reversed>(3), b = std::make_shared<Reversed>(3);
  dist::DDPOptions small{.bucket_cap_mb = 0.002, .first_bucket_mb = 0.002};
  small.rebuild_buckets = true;
  dist::DistributedDataParallel rebuilt(a, group(), small);
  small.rebuild_buckets = false;
  dist::DistributedDataParallel fixed(b, group(), small);
  const auto before = rebuilt.buckets();
  // Reverse registration puts fc1 first; backward produces fc2's gradients first.
  CHECK(before[0].parameter_names[0].rfind("fc1.", 0) == 0);
  optim::SGD opt_a(a->parameters(), {.lr = 0.1}), opt_b(b->parameters(), {.lr = 0.1});
  for (int step = 0; step < 3; ++step) {
    const Batch mine = my_shard(global_batch(step, N * kPerRank));
    opt_a.zero_grad();
    opt_b.zero_grad();
    rg::cross_entropy(rebuilt(mine.x), mine.y).backward();
    rg::cross_entropy(fixed(mine.x), mine.y).backward();
    opt_a.step();
    opt_b.step();
    CHECK(params_differ(*a, *b, 1e-6, 1e-7) == "");
  }
  const auto after = rebuilt.buckets();
  CHECK(after[0].parameter_names[0].rfind("fc2.", 0) == 0);  // rebuilt in observed order
  (void)r;
}

TEST_CASE("ddp: the fp16 compression hook stays within f16 precision of the f32 AllReduce") {
  const int N = dist::world().size;
  auto a = make_mlp(11), b = make_mlp(11);
  dist::DistributedDataParallel exact(a, group());
  dist::DistributedDataParallel compressed(b, group(), {.comm_hook = dist::fp16_compress_hook});
  const Batch mine = my_shard(global_batch(0, N * kPerRank));
  rg::cross_entropy(exact(mine.x), mine.y).backward();
  rg::cross_entropy(compressed(mine.x), mine.y).backward();
  auto pa = a->parameters(), pb = b->parameters();
  for (size_t i = 0; i < pa.size(); ++i) {
    CAPTURE(i);
    // Stated tolerance: each rank's term (gradient / N) is rounded to f16 (relative 2^-11) and the
    // sum once more, so the error is bounded relative to the terms, not to the result (terms of
    // opposite sign cancel): every element within 2e-3 x the tensor's largest gradient.
    const double largest = pa[i].grad().abs().flatten().max(0, false).item();
    const double worst = (pa[i].grad() - pb[i].grad()).abs().flatten().max(0, false).item();
    CHECK(worst <= 2e-3 * largest);
    CHECK(worst > 0);  // it really went through f16
  }
  CHECK_THROWS_WITH_AS(dist::comm_hook_by_name("carrier-pigeon"), doctest::Contains("unknown communication hook"),
                       rg::Error);
}

// The largest |gradient| element any rank computes on its own shard, for every parameter of a
// fresh make_mlp(seed): the scale the low-precision ring's roundings are relative to.
std::vector<double> largest_local_gradients(uint64_t seed, const Batch& mine, dist::ProcessGroup& g) {
  auto local = make_mlp(seed);
  rg::cross_entropy((*local)(mine.x), mine.y).backward();
  std::vector<double> out;
  for (const rg::Tensor& p : local->parameters()) {
    rg::Tensor m = p.grad().abs().flatten().max(0, false).reshape({1});
    g.allreduce(m, dist::ReduceOp::max)->wait();
    out.push_back(m.item());
  }
  return out;
}

TEST_CASE("ddp: the low-precision hooks stay within their format's bound of the f32 AllReduce, on every rank alike") {
  const int N = dist::world().size;
  const Batch mine = my_shard(global_batch(0, N * kPerRank));
  auto g = group();
  const std::vector<double> largest = largest_local_gradients(11, mine, *g);
  for (const std::string name : {"bf16", "bf16-ef", "fp8-e4m3", "fp8-e5m2", "fp8-e4m3-noef"}) {
    CAPTURE(name);
    const double u = name.rfind("bf16", 0) == 0 ? 0x1p-8 : name.rfind("fp8-e4m3", 0) == 0 ? 0x1p-4 : 0x1p-3;
    auto a = make_mlp(11), b = make_mlp(11);
    dist::DistributedDataParallel exact(a, g);
    const dist::NamedCommHook hook = dist::make_comm_hook(name);
    dist::DistributedDataParallel compressed(b, g, {.comm_hook = hook.hook});
    rg::cross_entropy(exact(mine.x), mine.y).backward();
    rg::cross_entropy(compressed(mine.x), mine.y).backward();
    auto pa = a->parameters(), pb = b->parameters();
    for (size_t i = 0; i < pa.size(); ++i) {
      CAPTURE(i);
      // Stated bound: a partial sum over ranks is at most N x the largest local gradient, in sum
      // units; each of the N-1 hops rounds it by at most u of its block's largest (Note [Scaled FP8
      // blocks]), and the average once more: N u x the largest local gradient in all.
      const rg::Tensor diff = (pa[i].grad() - pb[i].grad()).abs().flatten();
      const double worst = diff.max(0, false).item();
      CHECK(worst <= N * u * largest[i] * 1.001);
      if (N > 1) CHECK(worst > 0);  // it really went through the low format
      // Every rank decoded the same bits.
      rg::Tensor low = pb[i].grad().flatten().clone(), high = low.clone();
      g->allreduce(low, dist::ReduceOp::min)->wait();
      g->allreduce(high, dist::ReduceOp::max)->wait();
      CHECK((high - low).abs().max(0, false).item() == 0);
    }
    const bool ef =
        name.find("-ef") != std::string::npos || (name.rfind("fp8", 0) == 0 && name.find("noef") == std::string::npos);
    CHECK(hook.state->state_bytes() == (ef ? static_cast<int64_t>(compressed.buckets().front().numel) * 4 : 0));
    CHECK(hook.state->calls == static_cast<int64_t>(compressed.buckets().size()));
  }
}

TEST_CASE("ddp: error feedback carries each parameter's residual across a bucket rebuild, losing nothing") {
  // Fixed parameters (no optimizer step), a new batch each step: the exact averaged gradients of
  // the steps, summed, equal the compressed ones plus the ranks' mean residual (Note [Error
  // feedback]). Small buckets, rebuilt after the first step in the observed order, so that every
  // parameter's residual changes place.
  const int N = dist::world().size;
  auto a = std::make_shared<Reversed>(3), b = std::make_shared<Reversed>(3);
  dist::DDPOptions small{.bucket_cap_mb = 0.002, .first_bucket_mb = 0.002};
  auto g = group();
  dist::DistributedDataParallel exact(a, g, small);
  const dist::NamedCommHook hook = dist::make_comm_hook("fp8-e4m3");
  small.comm_hook = hook.hook;
  dist::DistributedDataParallel compressed(b, g, small);
  const auto before = compressed.buckets();
  std::map<std::string, rg::Tensor> exact_sum, compressed_sum;
  optim::SGD clear_a(a->parameters(), {.lr = 0.1}), clear_b(b->parameters(), {.lr = 0.1});  // never stepped
  for (int step = 0; step < 4; ++step) {
    const Batch mine = my_shard(global_batch(step, N * kPerRank));
    clear_a.zero_grad();
    clear_b.zero_grad();
    rg::cross_entropy(exact(mine.x), mine.y).backward();
    rg::cross_entropy(compressed(mine.x), mine.y).backward();
    for (const auto& [name, p] : a->named_parameters()) {
      rg::Tensor e = p.grad().flatten().to(rg::DType::f64);
      exact_sum[name] = exact_sum.count(name) ? exact_sum[name] + e : e;
    }
    for (const auto& [name, p] : b->named_parameters()) {
      rg::Tensor c = p.grad().flatten().to(rg::DType::f64);
      compressed_sum[name] = compressed_sum.count(name) ? compressed_sum[name] + c : c;
    }
  }
  CHECK(compressed.buckets()[0].parameter_names != before[0].parameter_names);  // rebuilt
  auto* state = dynamic_cast<dist::LowPrecisionHookState*>(hook.state.get());
  REQUIRE(state != nullptr);
  double worst = 0, worst_without = 0, scale = 0;
  for (const auto& named : b->named_parameters()) {
    const std::string& name = named.first;  // a plain reference: clang 14 cannot capture a binding
    const rg::Tensor& p = named.second;
    CAPTURE(name);
    rg::Tensor held = state->residuals.of(name).clone();
    REQUIRE(held.numel() == p.numel());
    g->allreduce(held, dist::ReduceOp::avg)->wait();
    const rg::Tensor lost = compressed_sum[name] + held.to(rg::DType::f64) - exact_sum[name];
    worst = std::max(worst, lost.abs().max(0, false).item());
    worst_without = std::max(worst_without, (compressed_sum[name] - exact_sum[name]).abs().max(0, false).item());
    scale = std::max(scale, exact_sum[name].abs().max(0, false).item());
  }
  CHECK(worst <= 1e-5 * scale);
  if (N > 1) CHECK(worst_without > 1e-3 * scale);  // what error feedback makes up for
  // One f32 residual per gradient element after the rebuild: the old layouts are let go.
  int64_t elements = 0;
  for (const rg::Tensor& p : b->parameters()) elements += p.numel();
  CHECK(state->state_bytes() == elements * static_cast<int64_t>(sizeof(float)));
}

// Row-major double matrices for the PowerSGD reference.
using Matrix = std::vector<double>;  // (rows, cols)
Matrix matmul(const Matrix& a, const Matrix& b, int64_t n, int64_t k, int64_t m, bool a_transposed = false,
              bool b_transposed = false) {
  Matrix c(static_cast<size_t>(n * m), 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < m; ++j)
      for (int64_t l = 0; l < k; ++l)
        c[i * m + j] += (a_transposed ? a[l * n + i] : a[i * k + l]) * (b_transposed ? b[j * k + l] : b[l * m + j]);
  return c;
}
void orthogonalize(Matrix& a, int64_t rows, int64_t cols) {
  for (int64_t i = 0; i < cols; ++i) {
    double norm = 0;
    for (int64_t k = 0; k < rows; ++k) norm += a[k * cols + i] * a[k * cols + i];
    norm = std::sqrt(norm);
    for (int64_t k = 0; k < rows; ++k) a[k * cols + i] /= norm;
    for (int64_t j = i + 1; j < cols; ++j) {
      double dot = 0;
      for (int64_t k = 0; k < rows; ++k) dot += a[k * cols + i] * a[k * cols + j];
      for (int64_t k = 0; k < rows; ++k) a[k * cols + j] -= dot * a[k * cols + i];
    }
  }
}

TEST_CASE("ddp: the PowerSGD hook computes what a double-precision reference of the algorithm does") {
  // Parameters held fixed (no optimizer step), a new batch each step. Step 0 is plain AllReduce
  // (start_iteration 1), steps 1-3 PowerSGD of rank 2 with error feedback and warm start. The
  // reference computes every rank's local gradient itself (the global batch is known everywhere)
  // and runs Note [PowerSGD] in double.
  const int N = dist::world().size;
  const int rank = 2;
  const dist::PowerSgdOptions options{.rank = rank, .start_iteration = 1, .random_seed = 42};
  auto model = make_mlp(11);
  const dist::NamedCommHook hook = dist::make_comm_hook("powersgd", options);
  dist::DistributedDataParallel ddp(model, group(), {.rebuild_buckets = false, .comm_hook = hook.hook});
  REQUIRE(ddp.buckets().size() == 1);
  const std::vector<std::string> order = ddp.buckets()[0].parameter_names;
  optim::SGD clear(model->parameters(), {.lr = 0.1});  // never stepped
  std::map<std::string, rg::Tensor> param;
  for (const auto& [name, p] : model->named_parameters()) param[name] = p;
  std::map<std::string, std::vector<Matrix>> residual;  // per parameter, per rank
  std::map<std::string, Matrix> q_kept;
  int64_t qs_made = 0;
  auto* state = dynamic_cast<dist::PowerSgdState*>(hook.state.get());
  REQUIRE(state != nullptr);
  for (int step = 0; step < 4; ++step) {
    CAPTURE(step);
    const Batch global = global_batch(step, N * kPerRank);
    // Every rank's local gradients, by parameter.
    std::map<std::string, std::vector<Matrix>> local;
    for (int r = 0; r < N; ++r) {
      auto copy = make_mlp(11);
      const Batch shard{global.x.narrow(0, r * kPerRank, kPerRank).contiguous(),
                        global.y.narrow(0, r * kPerRank, kPerRank).contiguous()};
      rg::cross_entropy((*copy)(shard.x), shard.y).backward();
      for (const auto& [name, p] : copy->named_parameters()) local[name].push_back(p.grad().flatten().to_vector());
    }
    clear.zero_grad();
    const Batch mine = my_shard(global);
    rg::cross_entropy(ddp(mine.x), mine.y).backward();
    for (const std::string& name : order) {
      CAPTURE(name);
      const rg::Shape shape = param[name].shape();
      const int64_t n = shape[0], m = param[name].numel() / n;
      Matrix expected(static_cast<size_t>(n * m), 0.0);
      std::vector<Matrix>& e = residual[name];
      if (e.empty()) e.assign(static_cast<size_t>(N), Matrix(static_cast<size_t>(n * m), 0.0));
      std::vector<Matrix> M = local[name];
      if (step >= 1)
        for (int r = 0; r < N; ++r)
          for (size_t i = 0; i < M[r].size(); ++i) M[r][i] += e[r][i];
      const bool compressed = step >= 1 && shape.size() == 2 && n * m > (n + m) * rank * 2;
      if (!compressed) {
        for (int r = 0; r < N; ++r)
          for (size_t i = 0; i < expected.size(); ++i) expected[i] += M[r][i] / N;
      } else {
        Matrix q;
        if (q_kept.count(name)) {
          q = q_kept[name];
        } else {
          rg::Generator gen(options.random_seed + static_cast<uint64_t>(qs_made++));
          q = rg::randn({m, rank}, gen).to_vector();
        }
        orthogonalize(q, m, rank);
        Matrix p(static_cast<size_t>(n * rank), 0.0);
        for (int r = 0; r < N; ++r) {
          const Matrix pr = matmul(M[r], q, n, m, rank);
          for (size_t i = 0; i < p.size(); ++i) p[i] += pr[i];
        }
        orthogonalize(p, n, rank);
        Matrix q_new(static_cast<size_t>(m * rank), 0.0);
        for (int r = 0; r < N; ++r) {
          const Matrix qr = matmul(M[r], p, m, n, rank, /*a_transposed=*/true);
          for (size_t i = 0; i < q_new.size(); ++i) q_new[i] += qr[i] / N;
        }
        expected = matmul(p, q_new, n, rank, m, false, /*b_transposed=*/true);
        q_kept[name] = q_new;
        const std::vector<double> kept = state->q_of(name).to_vector();
        double worst_q = 0, largest_q = 0;
        for (size_t i = 0; i < kept.size(); ++i) {
          worst_q = std::max(worst_q, std::fabs(kept[i] - q_new[i]));
          largest_q = std::max(largest_q, std::fabs(q_new[i]));
        }
        CHECK(worst_q <= 1e-4 * largest_q);
      }
      if (step >= 1)
        for (int r = 0; r < N; ++r)
          for (size_t i = 0; i < expected.size(); ++i) e[r][i] = M[r][i] - expected[i];
      const std::vector<double> got = param[name].grad().flatten().to_vector();
      double worst = 0, largest = 0;
      for (size_t i = 0; i < got.size(); ++i) {
        worst = std::max(worst, std::fabs(got[i] - expected[i]));
        largest = std::max(largest, std::fabs(expected[i]));
      }
      CHECK(worst <= 1e-4 * largest);  // f32 against double, through two orthogonalizations
      const std::vector<double> mine_e = state->residuals.of(name).defined() ? state->residuals.of(name).to_vector()
                                                                             : std::vector<double>(got.size(), 0.0);
      double worst_e = 0;
      for (size_t i = 0; i < mine_e.size(); ++i)
        worst_e = std::max(worst_e, std::fabs(mine_e[i] - e[static_cast<size_t>(dist::world().rank)][i]));
      CHECK(worst_e <= 1e-4 * std::max(largest, 1e-30));
    }
  }
  CHECK(state->iteration() == 3);
  CHECK(state->numel_after < state->numel_before);
}

TEST_CASE("ddp: a hook's state in the training checkpoint makes a resume bit-exact") {
  const int N = dist::world().size;
  auto g = group();
  rg::Tensor pid = rg::full({1}, static_cast<double>(::getpid()), {.dtype = rg::DType::i64});
  g->broadcast(pid, 0)->wait();  // one file name on every rank
  for (const std::string name : {"fp8-e4m3", "powersgd"}) {
    CAPTURE(name);
    const std::string path = (std::filesystem::temp_directory_path() /
                              rg::str_cat("ringgrad_hook_state_", static_cast<int64_t>(pid.item()), "_", name))
                                 .string();
    const dist::PowerSgdOptions powersgd{.rank = 2, .start_iteration = 1};
    // Trains `steps` steps from `first`, saving after step `save_at` (if >= 0); returns the
    // parameters at the end. `resume`: load the checkpoint first, the hook's state included or not.
    auto run = [&](int first, int steps, int save_at, bool resume, bool with_hook_state) {
      auto model = make_mlp(resume ? 99 : 11);  // a resumed run starts from other weights: the file must win
      const dist::NamedCommHook hook = dist::make_comm_hook(name, powersgd);
      dist::DistributedDataParallel ddp(model, g, {.comm_hook = hook.hook});
      optim::SGD opt(model->parameters(), {.lr = 0.1, .momentum = 0.9});
      dist::CommHookCheckpoint hook_state(hook.state, g);
      optim::TrainingCheckpoint checkpoint;
      checkpoint.add("model", *model).add_optimizer("optimizer", opt, *model);
      if (with_hook_state) checkpoint.add("comm_hook", hook_state);
      dist::sync_checkpoint(checkpoint, g);
      if (resume) checkpoint.load(path, {.strict = with_hook_state});
      for (int step = first; step < first + steps; ++step) {
        const Batch mine = my_shard(global_batch(step, N * kPerRank));
        opt.zero_grad();
        rg::cross_entropy(ddp(mine.x), mine.y).backward();
        opt.step();
        if (step == save_at) {
          hook_state.gather();
          checkpoint.save(path);
        }
      }
      std::vector<std::vector<double>> out;
      for (const rg::Tensor& p : model->parameters()) out.push_back(p.to_vector());
      return out;
    };
    const auto straight = run(0, 6, 2, false, true);
    const auto resumed = run(3, 3, -1, true, true);
    CHECK(resumed == straight);  // bit for bit
    const auto without = run(3, 3, -1, true, false);
    if (N > 1) CHECK(without != straight);  // the residuals (and Qs) are what made it exact
    g->barrier()->wait();
    if (g->rank() == 0) std::filesystem::remove(path);
  }
}

TEST_CASE("ddp: a parameter without gradient is an error naming it, or zeros with find_unused_parameters") {
  const int N = dist::world().size;
  const Batch mine = my_shard(global_batch(0, N * kPerRank));
  {
    auto m = std::make_shared<WithUnused>(1);
    dist::DistributedDataParallel ddp(m, group());
    CHECK_THROWS_WITH_AS(rg::cross_entropy(ddp(mine.x), mine.y).backward(),
                         doctest::Contains("received no gradient in this backward: 'unused.weight', 'unused.bias'"),
                         rg::Error);
  }
  {
    auto m = std::make_shared<WithUnused>(1);
    dist::DistributedDataParallel ddp(m, group(), {.find_unused_parameters = true});
    for (int step = 0; step < 2; ++step) rg::cross_entropy(ddp(mine.x), mine.y).backward();
    CHECK(rg::equal(m->unused->weight.grad(), rg::zeros({3, 64})));
    CHECK(m->fc->weight.grad().abs().sum().item() > 0);
  }
}

// A buffer forward reads and updates (as a running statistic would): y = w x + offset, offset += 1.
struct WithBuffer : nn::Module {
  rg::Tensor w, offset;
  WithBuffer() {
    w = register_parameter("w", rg::ones({1}));
    offset = register_buffer("offset", rg::zeros({1}));
  }
  rg::Tensor forward(const rg::Tensor& x) override {
    rg::Tensor y = x * w + offset.detach();
    rg::NoGradGuard no_grad;
    offset.add_(1.0);
    return y;
  }
};

TEST_CASE("ddp: buffers follow rank 0 at construction and before every forward (broadcast_buffers)") {
  const int r = dist::world().rank;
  const rg::Tensor x = rg::full({2}, 10.0);
  for (bool broadcast : {true, false}) {
    CAPTURE(broadcast);
    auto m = std::make_shared<WithBuffer>();
    m->offset.fill_(100.0 * r);  // replicas disagree before DDP
    dist::DistributedDataParallel ddp(m, group(), {.broadcast_buffers = broadcast});
    CHECK(m->offset.item() == (broadcast ? 0.0 : 100.0 * r));
    m->offset.fill_(m->offset.item() + 1000.0 * r);  // rank r drifts on its own between forwards
    const double y = ddp(x).to_vector()[0];
    if (broadcast) CHECK(y == 10.0);            // every rank used rank 0's buffer (0)
    else CHECK(y == 10.0 + 1100.0 * r);         // each its own
    CHECK(m->offset.item() == y - 10.0 + 1.0);  // and forward's update applied after that
  }
}

TEST_CASE("ddp: ranks with different models are refused, naming the parameter and the ranks") {
  const int N = dist::world().size, r = dist::world().rank;
  if (N == 1) return;
  auto m = make_mlp(1, r == N - 1 ? 33 : 32);  // the last rank's hidden layer is wider
  const std::string theirs = rg::str_cat("rank ", N - 1, " has '1.weight (33, 64) f32 cpu'");
  CHECK_THROWS_WITH_AS(dist::DistributedDataParallel(m, group()),
                       doctest::Contains("First difference, parameter #0:\n  rank 0 has '1.weight (32, 64) f32 cpu'"),
                       rg::Error);
  CHECK_THROWS_WITH_AS(dist::DistributedDataParallel(m, group()), doctest::Contains(theirs.c_str()), rg::Error);
}

TEST_CASE("ddp: GradScaler's found-inf flag is combined across ranks, so every rank skips together") {
  const int r = dist::world().rank;
  auto m = make_mlp(2);
  auto pg = group();
  optim::SGD opt(m->parameters(), {.lr = 0.1});
  optim::GradScaler scaler;
  dist::sync_found_inf(scaler, pg);
  for (auto& p : m->parameters()) p.set_grad(rg::ones(p.shape()));
  if (r == 0) m->parameters()[0].grad().fill_(std::numeric_limits<double>::infinity());  // only rank 0 overflowed
  const rg::Tensor before = m->parameters()[1].clone();
  CHECK_FALSE(scaler.step(opt));  // every rank skips
  CHECK(rg::equal(m->parameters()[1], before));
}

TEST_CASE("ddp: stats and the merged Chrome trace") {
  const int N = dist::world().size, r = dist::world().rank;
  auto m = make_mlp(4);
  dist::DistributedDataParallel ddp(m, group(), {.bucket_cap_mb = 0.004, .first_bucket_mb = 0.001, .trace = true});
  const int64_t buckets = static_cast<int64_t>(ddp.buckets().size());
  optim::SGD opt(m->parameters(), {.lr = 0.1});
  for (int step = 0; step < 3; ++step) {
    const Batch mine = my_shard(global_batch(step, N * kPerRank));
    opt.zero_grad();
    rg::cross_entropy(ddp(mine.x), mine.y).backward();
    opt.step();
  }
  const dist::DDPStats& s = ddp.stats();
  CHECK(s.steps == 3);
  CHECK(s.bucket_reductions == 3 * buckets);
  CHECK(s.last.compute_ms > 0);
  CHECK(s.last.comm_ms >= 0);
  CHECK(s.last.exposed_comm_ms >= 0);
  CHECK(s.total.overlap_percent() >= 0);
  CHECK(s.total.overlap_percent() <= 100);
  CHECK(s.summary().find("ddp: 3 steps") == 0);
  bool has_forward = false, has_node = false, has_bucket = false;
  for (const auto& e : ddp.trace_events()) {
    has_forward |= e.name == "forward" && e.thread == "compute";
    has_node |= e.name == "AccumulateGrad";
    has_bucket |= e.name == "bucket 0" && e.thread == "comm:ring" && e.pid == r;
  }
  CHECK(has_forward);
  CHECK(has_node);
  CHECK(has_bucket);
  const std::string path = "/tmp/ringgrad_test_ddp_trace.json";
  ddp.write_trace(path);
  if (r == 0) {
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    const std::string json = text.str();
    CHECK(json.find("{\"traceEvents\": [") == 0);
    // One block per rank: the last rank's bucket events made it to rank 0's file.
    CHECK(json.find(rg::str_cat("\"pid\": ", N - 1, ", \"tid\": \"comm:ring\"")) != std::string::npos);
    // Timestamps survive the trip to rank 0 at full precision: rank 0's own first event is in the
    // file with the microseconds it was recorded with.
    const auto events = ddp.trace_events();  // a copy: trace_events() returns a vector by value
    const auto& first = events.front();
    char ts[64];
    std::snprintf(ts, sizeof ts, "\"ts\": %.3f, \"dur\": %.3f", first.start_us, first.duration_us);
    CHECK(json.find(ts) != std::string::npos);
    std::remove(path.c_str());
  }
}

TEST_CASE("ddp: the profiler's op events join the merged Chrome trace, under each rank") {
  const int N = dist::world().size, r = dist::world().rank;
  auto m = make_mlp(4);
  dist::DistributedDataParallel ddp(m, group(), {.trace = true});
  optim::SGD opt(m->parameters(), {.lr = 0.1});
  rg::profiler::reset();
  rg::profiler::enable({.trace_events = true});
  const Batch mine = my_shard(global_batch(0, N * kPerRank));
  opt.zero_grad();
  rg::cross_entropy(ddp(mine.x), mine.y).backward();
  opt.step();
  rg::profiler::disable();
  const std::string path = "/tmp/ringgrad_test_ddp_profiled_trace.json";
  ddp.write_trace(path);
  rg::profiler::reset();
  if (r == 0) {
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    const std::string json = text.str();
    for (int rank = 0; rank < N; ++rank) {
      // The forward's products on each rank's compute row (nn::Linear: the GEMM that starts from the
      // bias, or with fusion off the fill and addmm_).
      const char* product = rg::fusion_enabled() ? "addmm_bias" : "addmm_";
      CHECK(json.find(rg::str_cat("\"name\": \"", product, "\", \"cat\": \"op:forward\", \"ph\": \"X\", \"pid\": ",
                                  rank, ", \"tid\": \"compute\"")) != std::string::npos);
      CHECK(json.find(rg::str_cat("\"cat\": \"op:backward\", \"ph\": \"X\", \"pid\": ", rank)) != std::string::npos);
      CHECK(json.find(rg::str_cat("\"name\": \"SGD.step\", \"cat\": \"op:optimizer\", \"ph\": \"X\", \"pid\": ",
                                  rank)) != std::string::npos);
    }
    CHECK(json.find("\"name\": \"forward\", \"cat\": \"compute\"") != std::string::npos);
    std::remove(path.c_str());
  }
}

// SGD, not Adam: the key part of c_attn's bias has an exactly-zero gradient (adding a constant to
// every key shifts each query's scores uniformly, and softmax ignores that), so its computed
// gradient is rounding noise (~1e-9) that Adam's normalisation turns into full-size, sign-random
// steps -- in any implementation. Gradients are compared directly as well.
TEST_CASE("ddp: a tiny GPT on N ranks x batch B == one process x batch N*B (gradients, SGD, 3 steps)") {
  const int N = dist::world().size, r = dist::world().rank;
  nn::GPTConfig c{.vocab_size = 11, .block_size = 8, .n_layer = 2, .n_head = 2, .n_embd = 16};
  rg::Generator g_ref(21), g_rep(r == 0 ? 21 : 40 + r);
  auto reference = std::make_shared<nn::GPT>(c, &g_ref);
  auto replica = std::make_shared<nn::GPT>(c, &g_rep);
  dist::DistributedDataParallel ddp(replica, group(), {.bucket_cap_mb = 0.01, .first_bucket_mb = 0.002});
  CHECK(ddp.buckets().size() >= 3);
  optim::SGD ref_opt(reference->parameters(), {.lr = 0.1, .momentum = 0.9});
  optim::SGD opt(replica->parameters(), {.lr = 0.1, .momentum = 0.9});
  const int64_t B = 2, T = 8;
  for (int step = 0; step < 3; ++step) {
    // The global batch: N*B sequences of T+1 tokens, identical on every rank.
    std::vector<int64_t> x, y;
    for (int64_t s = 0; s < N * B; ++s)
      for (int64_t t = 0; t < T; ++t) {
        x.push_back((s * 7 + t * 3 + step) % 11);
        y.push_back((s * 7 + (t + 1) * 3 + step) % 11);
      }
    rg::Tensor gx = rg::from_vector(x, {N * B, T}, {.dtype = rg::DType::i64});
    rg::Tensor gy = rg::from_vector(y, {N * B * T}, {.dtype = rg::DType::i64});
    ref_opt.zero_grad();
    rg::cross_entropy(reference->forward(gx).reshape({N * B * T, 11}), gy).backward();
    ref_opt.step();
    opt.zero_grad();
    rg::Tensor mx = gx.narrow(0, r * B, B).contiguous(), my = gy.narrow(0, r * B * T, B * T).contiguous();
    rg::cross_entropy(ddp(mx).reshape({B * T, 11}), my).backward();
    CAPTURE(step);
    auto gr = reference->parameters(), gd = replica->parameters();
    for (size_t i = 0; i < gr.size(); ++i) {
      CAPTURE(i);
      CHECK(rg::allclose(gd[i].grad(), gr[i].grad(), 1e-4, 1e-6));
    }
    opt.step();
    CHECK(params_differ(*reference, *replica, 1e-5, 1e-6) == "");
  }
}

// Activation checkpointing under DDP (Note [Recompute inside backward] in
// autograd/activation_checkpoint.h): every parameter's hook fires once per backward (DDP refuses a
// gradient marked ready twice), the buckets fill in the order the recompute makes the gradients
// ready, the same on every rank, and no_sync still skips the reductions. At N = 2 each element's
// sum is a + b whatever the bucket layout, so the gradients are bit-equal to the plain model's.
TEST_CASE("ddp: checkpointed GPT blocks, dropout on, give the plain model's gradients, under no_sync too") {
  const int N = dist::world().size, r = dist::world().rank;
  nn::GPTConfig c{.vocab_size = 11, .block_size = 8, .n_layer = 3, .n_head = 2, .n_embd = 16, .dropout = 0.1};
  rg::Generator g_plain(21), g_ckpt(21);
  auto plain = std::make_shared<nn::GPT>(c, &g_plain), ckpt = std::make_shared<nn::GPT>(c, &g_ckpt);
  for (const auto& block : *ckpt->h) block->checkpoint_activations();
  const dist::DDPOptions options{.bucket_cap_mb = 0.01, .first_bucket_mb = 0.002};
  dist::DistributedDataParallel plain_ddp(plain, group(), options), ckpt_ddp(ckpt, group(), options);
  optim::SGD plain_opt(plain->parameters(), {.lr = 0.1, .momentum = 0.9});
  optim::SGD ckpt_opt(ckpt->parameters(), {.lr = 0.1, .momentum = 0.9});
  const int64_t B = 2, T = 8, K = 2;
  auto micro_batch = [&](int step, int64_t k) {
    std::vector<int64_t> x, y;
    for (int64_t s = 0; s < B; ++s)
      for (int64_t t = 0; t < T; ++t) {
        const int64_t seq = (r * B + s) * 5 + step * 3 + k;
        x.push_back((seq + t * 3) % 11);
        y.push_back((seq + (t + 1) * 3) % 11);
      }
    return std::make_pair(rg::from_vector(x, {B, T}, {.dtype = rg::DType::i64}),
                          rg::from_vector(y, {B * T}, {.dtype = rg::DType::i64}));
  };
  // K micro-batches, the first K - 1 under no_sync; both models draw the same dropout masks.
  auto run_step = [&](dist::DistributedDataParallel& ddp, optim::Optimizer& opt, int step,
                      const rg::Generator& dropout_state) {
    rg::dropout_generator() = dropout_state;
    opt.zero_grad();
    for (int64_t k = 0; k < K; ++k) {
      const auto [x, y] = micro_batch(step, k);
      if (k < K - 1) {
        auto guard = ddp.no_sync();
        rg::cross_entropy(ddp(x).reshape({B * T, 11}), y).backward();
      } else {
        rg::cross_entropy(ddp(x).reshape({B * T, 11}), y).backward();
      }
    }
  };
  for (int step = 0; step < 3; ++step) {
    CAPTURE(step);
    const rg::Generator dropout_state = rg::dropout_generator();
    run_step(plain_ddp, plain_opt, step, dropout_state);
    const uint64_t plain_offset = rg::dropout_generator().offset();
    run_step(ckpt_ddp, ckpt_opt, step, dropout_state);
    CHECK(rg::dropout_generator().offset() == plain_offset);  // replayed, then put back
    CHECK(ckpt_ddp.stats().bucket_reductions == plain_ddp.stats().bucket_reductions);
    auto gp = plain->parameters(), gc = ckpt->parameters();
    for (size_t i = 0; i < gp.size(); ++i) {
      CAPTURE(i);
      if (N <= 2) CHECK(rg::equal(gc[i].grad(), gp[i].grad()));
      else CHECK(rg::allclose(gc[i].grad(), gp[i].grad(), 1e-5, 1e-7));
    }
    plain_opt.step();
    ckpt_opt.step();
  }
  CHECK(params_differ(*plain, *ckpt, N <= 2 ? 0.0 : 1e-5, N <= 2 ? 0.0 : 1e-6) == "");
}
