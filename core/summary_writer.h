// SummaryWriter: TensorBoard event files, the curves of a run where TensorBoard (and every tool that
// reads its format) can plot them -- as torch.utils.tensorboard.SummaryWriter:
//
//   SummaryWriter tb("runs/mnist");               // runs/mnist/events.out.tfevents.<time>.<host>.<pid>
//   tb.add_scalar("train/loss", loss, step);
//   tb.add_text("samples", text, step);
//
// The file: a sequence of TFRecords (u64 length, u32 masked CRC-32C of the length, the bytes, u32
// masked CRC-32C of the bytes; masked(c) = ((c >> 15) | (c << 17)) + 0xa282ead8), each holding one
// tensorflow.Event protocol buffer. The first carries file_version "brain.Event:2"; the others a
// Summary with one Value: a scalar as simple_value, a text as a string tensor tagged for the "text"
// plugin.
//
// Why the protocol buffers are encoded here rather than by libprotobuf: the few messages and fields
// above are all a writer needs (about 60 lines of varints and length prefixes), where libprotobuf
// would add a code generator to the build and a library to every program that links ringgrad. The
// test reads the files back with the official definitions' field numbers through Debian's
// python3-protobuf (tests/interop/test_tensorboard_events.py).
//
// Each event is written through to the file when it is added (one write per event: they come at
// logging points, not per element), so TensorBoard sees a run while it trains and a crash loses
// nothing already added. Errors (a folder that cannot be made, a failed write) throw
// ringgrad::Error naming the file.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace ringgrad {

class SummaryWriter {
 public:
  // Creates log_dir if needed. filename_suffix is appended to the file name (e.g. ".rank1" when
  // every rank logs into one folder).
  explicit SummaryWriter(const std::string& log_dir, const std::string& filename_suffix = "");
  ~SummaryWriter();
  SummaryWriter(const SummaryWriter&) = delete;
  SummaryWriter& operator=(const SummaryWriter&) = delete;

  void add_scalar(const std::string& tag, double value, int64_t step);
  void add_text(const std::string& tag, const std::string& text, int64_t step);  // text: UTF-8, as TensorBoard reads it

  const std::string& path() const { return path_; }

 private:
  void write_event(const std::string& event);
  std::string path_;
  std::FILE* file_ = nullptr;
};

// CRC-32C (Castagnoli), the checksum of TFRecord framing; exposed for tests.
uint32_t crc32c(const void* data, size_t size);

}  // namespace ringgrad
