// DDPOptions::explain_steps (RINGGRAD_EXPLAIN): the narration of one step says what the Reducer
// does, in the order it does it. Checked against the rules it narrates, not against fixed text:
// every gradient of a bucket is ready before the bucket launches, buckets launch in index order,
// each gradient's range is its slot in the bucket, and only the asked-for steps are told.
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>

#include "dist/ddp/ddp.h"
#include "dist_test_util.h"
#include "nn/nn.h"

namespace nn = ringgrad::nn;

namespace {

// What the code under `run` writes to stderr (file descriptor 2), as text.
template <class F>
std::string capture_stderr(F run) {
  std::fflush(stderr);
  char path[] = "/tmp/ringgrad_explain_XXXXXX";
  const int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  const int saved = dup(2);
  dup2(fd, 2);
  run();
  std::fflush(stderr);
  dup2(saved, 2);
  close(saved);
  close(fd);
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  std::remove(path);
  return text.str();
}

}  // namespace

TEST_CASE("explain: one step narrated in the order the Reducer acts, from rank 0 only") {
  const int N = dist::world().size, r = dist::world().rank;
  rg::manual_seed(3);
  auto model = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(16, 12), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(12, 8),
      std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(8, 4)});
  // Small buckets, so that the step has several; no rebuild, so that the layout stays as narrated.
  dist::DistributedDataParallel ddp(
      model, dist::new_group("ring", test_options()),
      {.bucket_cap_mb = 0.0004, .first_bucket_mb = 0.0002, .rebuild_buckets = false, .explain_steps = 1});
  rg::Generator gen(11 + r);
  const rg::Tensor x = rg::randn({5, 16}, gen);
  const rg::Tensor y = rg::from_vector(std::vector<int64_t>{0, 1, 2, 3, 0}, {5}, {.dtype = rg::DType::i64});
  const std::string told = capture_stderr([&] {
    for (int step = 0; step < 2; ++step) rg::cross_entropy(ddp(x), y).backward();
  });
  if (r != 0) {
    CHECK(told.find("[explain") == std::string::npos);
    return;
  }
  CAPTURE(told);
  const std::vector<dist::BucketInfo> buckets = ddp.buckets();
  REQUIRE(buckets.size() >= 2);
  CHECK(told.find(rg::str_cat("step 1: backward began; ", buckets.size(), " bucket(s), reduced across ", N)) !=
        std::string::npos);
  CHECK(told.find("step 2") == std::string::npos);  // one step asked for

  // Each bucket's gradients, then its launch: in index order, each gradient in its slot.
  const std::regex ready(R"(gradient ready: (\S+) \S.*-> bucket (\d+) \[(\d+), (\d+)\))");
  const std::regex launched(R"(bucket (\d+) launched)");
  std::map<int, int64_t> filled;  // elements of each bucket seen ready
  int next_launch = 0;
  std::istringstream lines(told);
  for (std::string line; std::getline(lines, line);) {
    std::smatch m;
    if (std::regex_search(line, m, ready)) {
      const int b = std::stoi(m[2]);
      CHECK(b >= next_launch);  // never a gradient for a bucket already launched
      const auto& names = buckets.at(b).parameter_names;
      CHECK(std::find(names.begin(), names.end(), m[1].str()) != names.end());
      filled[b] += std::stoll(m[4]) - std::stoll(m[3]);
    } else if (std::regex_search(line, m, launched)) {
      const int b = std::stoi(m[1]);
      CHECK(b == next_launch++);
      int64_t params = 0;
      for (const auto& [name, t] : model->named_parameters())
        if (std::find(buckets[b].parameter_names.begin(), buckets[b].parameter_names.end(), name) !=
            buckets[b].parameter_names.end())
          params += t.numel();
      CHECK(filled[b] == params);  // the whole bucket was ready
    }
  }
  CHECK(next_launch == static_cast<int>(buckets.size()));
  CHECK(told.find("step 1 done: backward() returns") != std::string::npos);
  for (size_t b = 0; b < buckets.size(); ++b)
    CHECK(told.find(rg::str_cat("bucket ", b, " reduced on the communication thread")) != std::string::npos);
}
