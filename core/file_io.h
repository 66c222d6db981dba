// Whole files in and out. Reading takes the file in one piece (the formats here check sizes and
// checksums against the whole), and refuses a directory or an unreadable file with the reason.
// Writing is atomic, so that a crash or a failed write loses nothing: the bytes go to "<path>.tmp",
// are flushed to disk (fsync), and only then renamed over <path>. A reader sees the old file or the
// new one, never a torn one; a failure at any step removes <path>.tmp and leaves <path> as it was.
// Checkpoints (nn/checkpoint.h) and safetensors files (nn/safetensors.h) are written this way.
#pragma once

#include <string>
#include <string_view>

namespace ringgrad {

// Throws ringgrad::Error naming `op` (e.g. "save_checkpoint") and the step that failed.
void write_file_atomically(const std::string& path, std::string_view bytes, const char* op);

// The bytes of the file at `path`; errors name `op`.
std::string read_whole_file(const std::string& path, const char* op);

// "<path>.tmp": where write_file_atomically writes first.
inline std::string temporary_path(const std::string& path) { return path + ".tmp"; }

}  // namespace ringgrad
