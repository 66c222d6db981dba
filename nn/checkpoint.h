// Checkpoint files: a list of named tensors in one small binary format.
//
// Layout (little-endian):
//   header   "RGCKPT\0\1"   8 bytes magic
//            u32 version (1), u32 entry count
//   entry    u32 name length, name bytes (UTF-8)
//            u8 dtype (DType's value), u8 ndim, i64 dims[ndim]
//            u64 byte count, the bytes (row-major, the dtype's native little-endian layout)
//   trailer  u32 CRC-32 (zlib) of every byte before it
//
// This is the file format; optim::TrainingCheckpoint (optim/training_checkpoint.h) builds a whole
// training state on it -- model, optimizer, scaler, loader, generators, counters -- in one call.
//
// save_checkpoint writes to "<path>.tmp", flushes it to disk, then renames it over <path>: a crash
// leaves either the old file or the new one, never a torn one; a failed write, fsync or rename
// removes <path>.tmp and leaves <path> as it was. load_checkpoint reads and checks the
// whole file (magic, version, sizes, checksum) before returning anything, so a truncated or corrupt
// file is an error that changes nothing.
#pragma once

#include <string>

#include "nn/module.h"

namespace ringgrad::nn {

void save_checkpoint(const std::string& path, const StateDict& entries);
// Throws unless save_checkpoint(path, ...) could write there: a non-empty path that is not a
// directory, in a folder that exists, where this process may create <path>.tmp. Run it before
// training, so that a bad destination is found at the start rather than at the first save.
void check_checkpoint_destination(const std::string& path);
StateDict load_checkpoint(const std::string& path);

// The single value of the entry `name` (an error naming the file's missing key otherwise).
double scalar_entry(const StateDict& state, const std::string& name);

}  // namespace ringgrad::nn
