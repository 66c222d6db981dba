// The C++ side of the interop tests (tests/interop/test_*.py): files whose every value the Python
// readers know in advance.
//
//   interop_sample --closed-form OUT    safetensors: tensors whose every value is a formula of its
//                                       index, which the reader recomputes on its own
//   interop_sample --logits MODEL OUT   an examples/gpt_mini --export loaded into nn::GPT (its shape
//                                       from the file's metadata), and the logits (B, T, V) of the
//                                       tokens token(b, t) = (7 (b T + t) + 3) mod V, as safetensors
//   interop_sample --tensorboard DIR    a TensorBoard event file: "train/loss" = (s + 1) / 3 and
//                                       "train/lr" = 0.001 / 2^s at steps s = 0 .. 4, then the text
//                                       "samples" = "h\xc3\xa9llo\nworld" at step 4
#include <cstdio>
#include <string>

#include "ringgrad.h"

using namespace ringgrad;

namespace {

// value(i) for element i of each tensor; every value exact in the tensor's dtype.
Tensor closed_form(const Shape& shape, DType dtype, double (*value)(int64_t)) {
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = value(static_cast<int64_t>(i));
  return from_vector(v, shape, {.dtype = dtype});
}

int write_closed_form(const std::string& out) {
  const StateDict state{
      {"f32.quarter_steps", closed_form({3, 4}, DType::f32, [](int64_t i) { return 0.25 * i - 1; })},
      {"f16.halves", closed_form({2, 3}, DType::f16, [](int64_t i) { return 0.5 * i - 2; })},
      {"bf16.powers", closed_form({5}, DType::bf16, [](int64_t i) { return static_cast<double>(int64_t{1} << i); })},
      {"f64.tenths", closed_form({2}, DType::f64, [](int64_t i) { return 0.1 * static_cast<double>(i + 1); })},
      {"i64.large", closed_form({3}, DType::i64, [](int64_t i) { return static_cast<double>((i << 33) - 7); })},
      {"i32.negative", closed_form({2, 2}, DType::i32, [](int64_t i) { return static_cast<double>(-i * 1000); })},
      {"u8.bytes", closed_form({4}, DType::u8, [](int64_t i) { return static_cast<double>(i * 85); })},
      {"scalar", closed_form({}, DType::f32, [](int64_t) { return 42.0; })},
      {"empty", zeros({0, 3})},
      {"na\xc3\xafve \"quoted\"", closed_form({1}, DType::f32, [](int64_t) { return -1.0; })},
  };
  nn::save_safetensors(out, state, {{"purpose", "closed form"}});
  return 0;
}

int64_t metadata_int(const nn::SafetensorsFile& f, const std::string& key) {
  for (const auto& [k, v] : f.metadata)
    if (k == key) return std::stoll(v);
  RG_FAIL("interop_sample", "the model file has no metadata '", key, "'");
}

int write_logits(const std::string& model_path, const std::string& out) {
  const nn::SafetensorsFile file = nn::read_safetensors(model_path);
  const nn::GPTConfig config{.vocab_size = metadata_int(file, "vocab_size"),
                             .block_size = metadata_int(file, "block_size"),
                             .n_layer = metadata_int(file, "n_layer"),
                             .n_head = metadata_int(file, "n_head"),
                             .n_embd = metadata_int(file, "n_embd")};
  nn::GPT model(config);
  const LoadResult loaded = model.load_state_dict(file.tensors);
  RG_CHECK(loaded.all_matched(), "interop_sample", loaded.describe());
  const int64_t B = 2, T = std::min<int64_t>(config.block_size, 32), V = config.vocab_size;
  std::vector<int64_t> tokens;
  for (int64_t i = 0; i < B * T; ++i) tokens.push_back((7 * i + 3) % V);
  NoGradGuard no_grad;
  const Tensor logits = model.forward(from_vector(tokens, {B, T})).to(DType::f32);  // (B, T, V)
  nn::save_safetensors(out, {{"logits", logits}});
  return 0;
}

int write_tensorboard(const std::string& dir) {
  SummaryWriter tb(dir);
  for (int64_t s = 0; s < 5; ++s) {
    tb.add_scalar("train/loss", static_cast<double>(s + 1) / 3, s);
    tb.add_scalar("train/lr", 0.001 / static_cast<double>(int64_t{1} << s), s);
  }
  tb.add_text("samples", "h\xc3\xa9llo\nworld", 4);
  std::printf("%s\n", tb.path().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::string mode = argc > 1 ? argv[1] : "";
    if (mode == "--closed-form" && argc == 3) return write_closed_form(argv[2]);
    if (mode == "--logits" && argc == 4) return write_logits(argv[2], argv[3]);
    if (mode == "--tensorboard" && argc == 3) return write_tensorboard(argv[2]);
    std::fprintf(stderr, "usage: %s --closed-form OUT | --logits MODEL OUT | --tensorboard DIR\n", argv[0]);
    return 2;
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
