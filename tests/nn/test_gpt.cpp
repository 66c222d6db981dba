// nn::GPT against an independent forward pass written here in plain double-precision loops, its
// parameter count against the closed form, and training: it can memorise a short text.
#include <doctest/doctest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "ringgrad.h"

using namespace ringgrad;

namespace {

using Vec = std::vector<double>;

// y (rows, out) = x (rows, in) @ w^T (w: (out, in)) + b
Vec affine(const Vec& x, int64_t rows, int64_t in, const Vec& w, const Vec* b, int64_t out) {
  Vec y(static_cast<size_t>(rows * out), 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double s = b ? (*b)[o] : 0.0;
      for (int64_t i = 0; i < in; ++i) s += x[r * in + i] * w[o * in + i];
      y[r * out + o] = s;
    }
  return y;
}

Vec layer_norm_rows(const Vec& x, int64_t rows, int64_t C, const Vec& w, const Vec& b) {
  Vec y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0, var = 0;
    for (int64_t c = 0; c < C; ++c) mean += x[r * C + c] / C;
    for (int64_t c = 0; c < C; ++c) var += (x[r * C + c] - mean) * (x[r * C + c] - mean) / C;
    for (int64_t c = 0; c < C; ++c) y[r * C + c] = (x[r * C + c] - mean) / std::sqrt(var + 1e-5) * w[c] + b[c];
  }
  return y;
}

double gelu_tanh(double x) { return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))); }

// The GPT-2 forward, for one sequence of T tokens: logits (T, V).
Vec naive_gpt(const std::map<std::string, Vec>& P, const nn::GPTConfig& c, const std::vector<int64_t>& tokens) {
  const int64_t T = static_cast<int64_t>(tokens.size()), C = c.n_embd, H = c.n_head, D = C / H, V = c.vocab_size;
  Vec x(static_cast<size_t>(T * C));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t k = 0; k < C; ++k)
      x[t * C + k] = P.at("wte.weight")[tokens[t] * C + k] + P.at("wpe.weight")[t * C + k];
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const std::string p = "h." + std::to_string(l) + ".";
    Vec a = layer_norm_rows(x, T, C, P.at(p + "ln_1.weight"), P.at(p + "ln_1.bias"));
    Vec qkv = affine(a, T, C, P.at(p + "attn.c_attn.weight"), &P.at(p + "attn.c_attn.bias"), 3 * C);
    Vec y(static_cast<size_t>(T * C), 0.0);
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < T; ++i) {
        Vec s(static_cast<size_t>(i + 1));
        double max = -1e300, sum = 0;
        for (int64_t j = 0; j <= i; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < D; ++d) dot += qkv[i * 3 * C + h * D + d] * qkv[j * 3 * C + C + h * D + d];
          s[j] = dot / std::sqrt(static_cast<double>(D));
          max = std::max(max, s[j]);
        }
        for (int64_t j = 0; j <= i; ++j) sum += (s[j] = std::exp(s[j] - max));
        for (int64_t d = 0; d < D; ++d)
          for (int64_t j = 0; j <= i; ++j) y[i * C + h * D + d] += s[j] / sum * qkv[j * 3 * C + 2 * C + h * D + d];
      }
    Vec proj = affine(y, T, C, P.at(p + "attn.c_proj.weight"), &P.at(p + "attn.c_proj.bias"), C);
    for (size_t k = 0; k < x.size(); ++k) x[k] += proj[k];
    Vec m = layer_norm_rows(x, T, C, P.at(p + "ln_2.weight"), P.at(p + "ln_2.bias"));
    Vec fc = affine(m, T, C, P.at(p + "mlp.c_fc.weight"), &P.at(p + "mlp.c_fc.bias"), 4 * C);
    for (double& v : fc) v = gelu_tanh(v);
    Vec out = affine(fc, T, 4 * C, P.at(p + "mlp.c_proj.weight"), &P.at(p + "mlp.c_proj.bias"), C);
    for (size_t k = 0; k < x.size(); ++k) x[k] += out[k];
  }
  x = layer_norm_rows(x, T, C, P.at("ln_f.weight"), P.at("ln_f.bias"));
  return affine(x, T, C, P.at("wte.weight"), nullptr, V);  // tied head
}

}  // namespace

TEST_CASE("GPT: parameter count is the closed form, names follow GPT-2, the head is tied") {
  nn::GPTConfig c{.vocab_size = 65, .block_size = 32, .n_layer = 3, .n_head = 4, .n_embd = 48};
  nn::GPT model(c);
  const int64_t C = c.n_embd;
  const int64_t expected = c.vocab_size * C + c.block_size * C + c.n_layer * (12 * C * C + 13 * C) + 2 * C;
  CHECK(model.parameter_count() == expected);
  std::vector<std::string> names;
  for (const auto& [name, t] : model.named_parameters()) names.push_back(name);
  CHECK(names.front() == "wte.weight");
  CHECK(std::find(names.begin(), names.end(), "h.2.attn.c_proj.weight") != names.end());
  CHECK(std::find(names.begin(), names.end(), "lm_head.weight") == names.end());  // tied: no separate head
}

TEST_CASE("GPT: logits and loss match a naive double-precision forward written in the test") {
  nn::GPTConfig c{.vocab_size = 7, .block_size = 6, .n_layer = 2, .n_head = 2, .n_embd = 8};
  Generator gen(3);
  nn::GPT model(c, &gen);
  // Non-trivial LayerNorm parameters too, so a wrong affine cannot hide.
  for (auto& [name, t] : model.named_parameters())
    if (name.find("ln_") != std::string::npos) t.detach().copy_(randn(t.shape(), gen) * 0.3 + 1.0);
  model.to(DType::f64);
  std::map<std::string, Vec> P;
  for (const auto& [name, t] : model.named_parameters()) P[name] = t.to_vector();
  const std::vector<int64_t> seq0{1, 4, 0, 6, 2}, seq1{3, 3, 5, 1, 0};
  Tensor idx = from_vector(std::vector<int64_t>{1, 4, 0, 6, 2, 3, 3, 5, 1, 0}, {2, 5}, {.dtype = DType::i64});
  Tensor logits = model.forward(idx);  // (2, 5, 7)
  CHECK(logits.shape() == Shape{2, 5, 7});
  Vec expected = naive_gpt(P, c, seq0), second = naive_gpt(P, c, seq1);
  expected.insert(expected.end(), second.begin(), second.end());
  const Vec got = logits.to_vector();
  double worst = 0;
  for (size_t k = 0; k < got.size(); ++k) worst = std::max(worst, std::abs(got[k] - expected[k]));
  CHECK(worst < 1e-10);
  // The loss: mean over positions of -log softmax(logits)[target].
  Tensor targets = from_vector(std::vector<int64_t>{4, 0, 6, 2, 5, 3, 5, 1, 0, 2}, {10}, {.dtype = DType::i64});
  const double loss = cross_entropy(logits.reshape({10, 7}), targets).item();
  double naive_loss = 0;
  const std::vector<double> tv = targets.to_vector();
  for (int r = 0; r < 10; ++r) {
    double max = -1e300, sum = 0;
    for (int v = 0; v < 7; ++v) max = std::max(max, expected[r * 7 + v]);
    for (int v = 0; v < 7; ++v) sum += std::exp(expected[r * 7 + v] - max);
    naive_loss -= (expected[r * 7 + static_cast<int>(tv[r])] - max - std::log(sum)) / 10;
  }
  CHECK(loss == doctest::Approx(naive_loss).epsilon(1e-12));
  CHECK_THROWS_WITH_AS(model.forward(zeros({1, 7}, {.dtype = DType::i64})), doctest::Contains("exceeds block_size 6"),
                       Error);
}

TEST_CASE("GPT: memorises a short text (loss near zero)") {
  const std::string text = "to be or not to be, that is the question.";
  std::vector<int64_t> ids;
  for (char ch : text) ids.push_back(static_cast<unsigned char>(ch) % 64);
  nn::GPTConfig c{.vocab_size = 64, .block_size = 32, .n_layer = 1, .n_head = 2, .n_embd = 32};
  Generator gen(7);
  nn::GPT model(c, &gen);
  optim::AdamW opt(model.parameters(), {.lr = 1e-2, .weight_decay = 0.0});
  const int64_t T = 32;
  Tensor x = from_vector(std::vector<int64_t>(ids.begin(), ids.begin() + T), {1, T}, {.dtype = DType::i64});
  Tensor y = from_vector(std::vector<int64_t>(ids.begin() + 1, ids.begin() + T + 1), {T}, {.dtype = DType::i64});
  double first = 0, last = 0;
  for (int step = 0; step < 150; ++step) {
    opt.zero_grad();
    Tensor loss = cross_entropy(model.forward(x).reshape({T, 64}), y);
    loss.backward();
    opt.step();
    if (step == 0) first = loss.item();
    last = loss.item();
  }
  CAPTURE(first);
  CAPTURE(last);
  CHECK(first > 3.5);  // ~ln 64 at the start
  CHECK(last < 0.05);  // memorised
}
