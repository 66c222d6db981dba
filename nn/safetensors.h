// safetensors files: named tensors in the format of Hugging Face's `safetensors` package, which
// PyTorch, JAX and the Hub's tools read -- the way weights leave ringgrad and come back.
//
// Layout (the format's specification, github.com/huggingface/safetensors):
//   u64 little-endian   N, the header's length
//   N bytes             a JSON object, UTF-8, starting with '{', possibly padded with spaces:
//                         {"NAME": {"dtype": "F32", "shape": [2, 3], "data_offsets": [BEGIN, END]}, ...,
//                          "__metadata__": {"format": "pt", ...}}   (string values only)
//   the data            each tensor's bytes, row-major, little-endian, at [BEGIN, END) of this part
//
// save_safetensors writes the state in its order, each tensor right after the previous one, the
// header padded to a multiple of 8 bytes (as the reference writer does, so that the data is aligned)
// with "__metadata__": {"format": "pt"} (what Hugging Face's loaders look for), atomically as
// save_checkpoint does (core/file_io.h). Dtypes: F32 F64 F16 BF16 I32 I64 U8, ringgrad's own.
//
// load_safetensors refuses, naming the file and the entry, what the specification forbids or
// ringgrad cannot hold, before returning anything: a header longer than the file (or than 100 MB,
// the reference reader's limit), JSON that is not one object of entries, an entry without exactly
// dtype / shape / data_offsets, an unknown dtype, a negative dimension, a shape whose bytes are
// not END - BEGIN, duplicate names, data that overlaps, leaves a hole or stops short of the file's
// end. Tensors come back in the order of their data.
//
// Module names are the module tree's (Module::state_dict: "h.0.attn.c_attn.weight"), which for
// nn::GPT are the names of nanoGPT's PyTorch GPT; docs/interop.md has the map.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/state_dict.h"

namespace ringgrad::nn {

using SafetensorsMetadata = std::vector<std::pair<std::string, std::string>>;

struct SafetensorsFile {
  StateDict tensors;             // in the order of their data in the file
  SafetensorsMetadata metadata;  // "__metadata__", in the file's order
};

// `metadata` is written after "format": "pt" (a "format" of its own replaces it).
void save_safetensors(const std::string& path, const StateDict& entries, const SafetensorsMetadata& metadata = {});
StateDict load_safetensors(const std::string& path);
SafetensorsFile read_safetensors(const std::string& path);

// The same from bytes in memory; `origin` names them in errors. The tensors own copies.
SafetensorsFile parse_safetensors(std::string_view bytes, const std::string& origin);
std::string serialize_safetensors(const StateDict& entries, const SafetensorsMetadata& metadata = {});

}  // namespace ringgrad::nn
