// Settings every rank must share, checked: one all-gather, and an error naming each setting that
// differs and which ranks hold which value -- instead of a hang or a silent divergence later.
//
//   dist::check_same_settings(*group, "mnist's flags", {{"--seed", std::to_string(seed)},
//                                                      {"--batch-size", std::to_string(batch)}});
//
// Under mpirun every rank gets the same command line, so these differ only when ranks are launched
// differently (`mpirun -np 1 prog --seed 1 : -np 1 prog --seed 2`) or read different files or
// environments; then different seeds give overlapping shards, different batch sizes a mean that is
// not the mean over N·B examples, different accumulation counts a hang. DistributedDataParallel
// checks its own options this way (dist/ddp/ddp.h).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "dist/process_group.h"

namespace ringgrad::dist {

using Settings = std::vector<std::pair<std::string, std::string>>;  // (name, value as text)

// A collective: every rank calls it with the same names in the same order. Throws the same
// ringgrad::Error on every rank when a value differs ("`what` differ between ranks: ...").
void check_same_settings(ProcessGroup& group, const std::string& what, const Settings& settings);

// Every rank's string, on every rank (two all-gathers: the lengths, then the padded bytes).
std::vector<std::string> allgather_strings(ProcessGroup& group, const std::string& mine);

}  // namespace ringgrad::dist
