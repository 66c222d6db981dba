#include "core/random_state.h"

#include "core/error.h"
#include "core/ops.h"

namespace ringgrad {
namespace {

Tensor u64_tensor(uint64_t v) {
  Tensor t = scalar_tensor(0, {.dtype = DType::i64});
  *t.data<int64_t>() = static_cast<int64_t>(v);  // the bits unchanged: a double holds only 53 of them
  return t;
}

}  // namespace

StateDict generator_state_dict(const Generator& generator) {
  return {{"seed", u64_tensor(generator.seed())}, {"offset", u64_tensor(generator.offset())}};
}

void load_generator_state_dict(Generator& generator, const StateDict& state) {
  const auto seed = static_cast<uint64_t>(state_int(state, "seed", "load_generator_state_dict"));
  const auto offset = static_cast<uint64_t>(state_int(state, "offset", "load_generator_state_dict"));
  generator.manual_seed(seed);
  generator.set_offset(offset);
}

StateDict random_state_dict() {
  StateDict out;
  for (auto& [name, t] : generator_state_dict(default_generator())) out.emplace_back("default." + name, t);
  for (auto& [name, t] : generator_state_dict(dropout_generator())) out.emplace_back("dropout." + name, t);
  const bool derived = dropout_generator().seed() == dropout_seed(default_generator().seed(), random_rank());
  out.emplace_back("dropout.streams", u64_tensor(dropout_streams() == DropoutStreams::per_rank ? 0 : 1));
  out.emplace_back("dropout.derived", u64_tensor(derived ? 1 : 0));
  return out;
}

void load_random_state_dict(const StateDict& state) {
  const char* who = "load_random_state_dict";
  const StateDict default_state = with_prefix_removed(state, "default.");
  const StateDict dropout_state = with_prefix_removed(state, "dropout.");
  // Read everything before changing anything.
  const int64_t streams = state_int(dropout_state, "streams", who);
  RG_CHECK(streams == 0 || streams == 1, who, "dropout.streams is ", streams, ", expected 0 or 1");
  const bool derived = state_int(dropout_state, "derived", who) != 0;
  Generator restored_default, restored_dropout;
  load_generator_state_dict(restored_default, default_state);
  load_generator_state_dict(restored_dropout, dropout_state);

  set_dropout_streams(streams == 0 ? DropoutStreams::per_rank : DropoutStreams::same_on_every_rank);
  manual_seed(restored_default.seed());  // reseeds the dropout stream from (seed, this rank)
  default_generator().set_offset(restored_default.offset());
  if (!derived) dropout_generator().manual_seed(restored_dropout.seed());
  dropout_generator().set_offset(restored_dropout.offset());
}

}  // namespace ringgrad
