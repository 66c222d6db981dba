#include "dist/shm/reduction_buffer.h"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "core/error.h"
#include "core/native/native.h"
#include "core/ops.h"
#include "dist/algorithms/reduce_kernels.h"
#include "dist/shm/segment.h"

namespace ringgrad::dist::detail {

namespace {

constexpr size_t kLine = 64;
constexpr size_t kPage = 4096;
// Elements per block of the reduction: the block's accumulation-type sum stays in L1.
constexpr int64_t kBlockElems = 2048;
// Bytes per claimed chunk: a few microseconds of work, so that the atomic claim is noise and a
// rank that wakes up late still finds chunks to share.
constexpr size_t kChunkBytes = size_t{32} << 10;
static_assert(std::atomic_ref<uint64_t>::is_always_lock_free, "counters are shared between processes");

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

}  // namespace

// What a rank says of one op: read by every rank once all have arrived.
struct OpHeader {
  int64_t tag;      // the op's collective tag
  uint64_t offset;  // byte offset of the tensor inside the rank's buffer
  int64_t numel;
  int32_t dtype;  // DType
  int32_t op;     // ReduceOp
};

// One rank's lines of the control block: its arrival counter and the headers of its last two ops.
// Only that rank writes them, so peers polling them never contend with each other's writes. Two
// headers, by the parity of s: a rank may finish op s (every chunk reduced, by others perhaps) and
// write its header for s + 1 while a slower peer has yet to read the headers of s.
struct alignas(64) SharedBuffer::Control {
  uint64_t arrived;  // the op s this rank last arrived at (atomic_ref: release / acquire)
  OpHeader header[2];
};

// The lines every rank writes: the chunks claimed and the chunks reduced, counted over the
// segment's lifetime (ops claim and complete the same number of chunks on every rank, so each rank
// knows where op s's chunks start: chunks_before_). One line each, so claims do not slow the reads
// of the completion count.
struct alignas(64) SharedBuffer::Counter {
  uint64_t value;  // atomic_ref
};

std::shared_ptr<SharedBuffer> SharedBuffer::create(ProcessGroup& group, size_t bytes) {
  static_assert(sizeof(Control) % kLine == 0 && sizeof(Counter) == kLine);
  const int rank = group.rank(), size = group.size();
  // The nonce line, each rank's Control, the two Counters.
  const size_t control_bytes = round_up(kLine + sizeof(Control) * static_cast<size_t>(size) + 2 * kLine, kPage);
  const size_t stride = round_up(std::max<size_t>(bytes, 1), kPage);
  const size_t total = control_bytes + stride * static_cast<size_t>(size);

  struct Announcement {
    char name[64];  // "" tells the others that rank 0 failed
    uint64_t nonce;
    uint64_t bytes;  // rank 0's: every rank must ask for the same size
  } announcement{};
  announcement.bytes = bytes;
  std::byte* mapping = nullptr;
  if (rank == 0) {
    announcement.nonce = new_shm_nonce();
    std::snprintf(announcement.name, sizeof announcement.name, "%s",
                  create_shm_segment(total, announcement.nonce, &mapping).c_str());
  }
  bool mapped_by_all = false;
  try {
    Tensor message = empty({static_cast<int64_t>(sizeof announcement)}, {.dtype = DType::u8});
    std::memcpy(message.raw_data(), &announcement, sizeof announcement);
    group.broadcast(message, 0)->wait();
    std::memcpy(&announcement, message.raw_data(), sizeof announcement);
    const bool same_size = announcement.bytes == bytes;
    if (rank != 0 && same_size && announcement.name[0] != '\0')
      mapping = map_shm_segment(announcement.name, total, announcement.nonce);
    // 1: mapped; 0: could not (every rank then takes an ordinary buffer); -1: another size than
    // rank 0's, a misuse that every rank reports.
    Tensor vote = from_vector(std::vector<double>{!same_size           ? -1.0
                                                  : mapping != nullptr ? 1.0
                                                                       : 0.0},
                              {1}, {.dtype = DType::i32});
    group.allreduce(vote, ReduceOp::min)->wait();
    const double least = vote.to_vector()[0];
    RG_CHECK(least >= 0, "dist.new_reduction_buffer", "the ranks asked for buffers of different sizes (rank ", rank,
             "/", size, ": ", bytes, " bytes, rank 0: ", announcement.bytes,
             " bytes); every rank must call it with the same numel and dtype");
    mapped_by_all = least == 1.0;
  } catch (...) {
    if (rank == 0 && announcement.name[0] != '\0') unlink_shm_segment(announcement.name);
    if (mapping != nullptr) munmap(mapping, total);
    throw;
  }
  // Everyone who could map it has: the name can go, the memory stays until the last munmap.
  if (rank == 0 && announcement.name[0] != '\0') unlink_shm_segment(announcement.name);
  if (!mapped_by_all) {
    if (mapping != nullptr) munmap(mapping, total);
    return nullptr;
  }
  return std::shared_ptr<SharedBuffer>(
      new SharedBuffer(&group, mapping, total, control_bytes, bytes, stride, rank, size));
}

SharedBuffer::SharedBuffer(const ProcessGroup* group, std::byte* mapping, size_t mapping_bytes, size_t control_bytes,
                           size_t bytes, size_t stride, int rank, int size)
    : InPlaceBuffer(group),
      mapping_(mapping),
      mapping_bytes_(mapping_bytes),
      data_(mapping + control_bytes),
      bytes_(bytes),
      stride_(stride),
      rank_(rank),
      size_(size) {}

// Local, like SharedSlots: the other ranks keep their own mappings.
SharedBuffer::~SharedBuffer() { munmap(mapping_, mapping_bytes_); }

SharedBuffer::Control& SharedBuffer::control_of(int rank) const {
  return *reinterpret_cast<Control*>(mapping_ + kLine + sizeof(Control) * static_cast<size_t>(rank));
}

SharedBuffer::Counter& SharedBuffer::claimed() const {
  return *reinterpret_cast<Counter*>(mapping_ + kLine + sizeof(Control) * static_cast<size_t>(size_));
}

SharedBuffer::Counter& SharedBuffer::completed() const { return (&claimed())[1]; }

namespace {
std::atomic_ref<uint64_t> counter(uint64_t& c) { return std::atomic_ref<uint64_t>(c); }
}  // namespace

// The OpHeader's `op` of an allgather, and of a reduce-scatter (kScatterOps + its ReduceOp): no
// ReduceOp has these values.
constexpr int32_t kGatherOp = -1;
constexpr int32_t kScatterOps = 16;

// One op of Note [Shared gradient buffers]: the arrival, the headers' check, the claimed chunks and
// the completion. What a chunk's work is -- a sum, or the owner's block copied -- is the subclass's.
// t: (n) viewed flat, inside this rank's buffer.
class InPlaceOp : public PendingOp {
 public:
  InPlaceOp(std::shared_ptr<SharedBuffer> buffer, const Tensor& t, int32_t op, int tag)
      : buffer_(std::move(buffer)),
        tensor_(t),
        op_(op),
        n_(t.numel()),
        element_size_(static_cast<int64_t>(t.element_size())),
        offset_(static_cast<uint64_t>(static_cast<std::byte*>(t.raw_data()) - buffer_->mine())),
        s_(buffer_->ops_ + 1),
        first_chunk_(buffer_->chunks_before_),
        end_chunk_(first_chunk_ + chunks()) {
    // The chunk counts and the headers' parity assume the previous op finished first (the
    // communication thread runs one collective at a time): check it rather than trust it.
    RG_CHECK(buffer_->finished_ == buffer_->ops_, "dist.allreduce", "shared-buffer op ", s_, " started before op ",
             buffer_->ops_, " finished (rank ", buffer_->rank_, ")");
    buffer_->ops_ = s_;
    for (int r = 0; r < buffer_->size_; ++r) copies_.push_back(buffer_->region_of(r) + offset_);
    SharedBuffer::Control& mine = buffer_->control_of(buffer_->rank_);
    mine.header[s_ % 2] =
        OpHeader{.tag = tag, .offset = offset_, .numel = n_, .dtype = static_cast<int32_t>(t.dtype()), .op = op};
    counter(mine.arrived).store(s_, std::memory_order_release);
  }

  bool poll() override {
    if (!worked_) {
      for (; waiting_for_ < buffer_->size_; ++waiting_for_)
        if (counter(buffer_->control_of(waiting_for_).arrived).load(std::memory_order_acquire) < s_) return false;
      check_headers();
      work_on_unclaimed_chunks();
      worked_ = true;
    }
    // Until every chunk is done, a peer may still be reading or writing my buffer.
    if (counter(buffer_->completed().value).load(std::memory_order_acquire) < end_chunk_) return false;
    buffer_->chunks_before_ = end_chunk_;
    buffer_->finished_ = s_;
    return true;
  }

 protected:
  // Elements [lo, hi) of the op, in every rank's copy (copies_[r]: the tensor's first byte there).
  virtual void work(int64_t lo, int64_t hi) = 0;

  int size() const { return buffer_->size_; }
  int rank() const { return buffer_->rank_; }
  int32_t op() const { return op_; }
  int64_t numel() const { return n_; }
  const std::vector<std::byte*>& copies() const { return copies_; }

 private:
  static std::string describe(const OpHeader& h) {
    const std::string what = h.op == kGatherOp     ? std::string("allgather")
                             : h.op >= kScatterOps ? std::string("reduce-scatter ") +
                                                         reduce_op_name(static_cast<ReduceOp>(h.op - kScatterOps))
                                                   : reduce_op_name(static_cast<ReduceOp>(h.op));
    return str_cat("tag ", h.tag, ", ", dtype_name(static_cast<DType>(h.dtype)), " ", what, ", ", h.numel,
                   " elements at byte ", h.offset);
  }

  void check_headers() const {
    const OpHeader& mine = buffer_->control_of(buffer_->rank_).header[s_ % 2];
    for (int r = 0; r < buffer_->size_; ++r) {
      const OpHeader& theirs = buffer_->control_of(r).header[s_ % 2];
      RG_CHECK(theirs.tag == mine.tag && theirs.offset == mine.offset && theirs.numel == mine.numel &&
                   theirs.dtype == mine.dtype && theirs.op == mine.op,
               op_ == kGatherOp     ? "dist.allgather"
               : op_ >= kScatterOps ? "dist.reduce_scatter"
                                    : "dist.allreduce",
               "rank ", r, " is at another collective (", describe(theirs), ") than rank ", buffer_->rank_, " (",
               describe(mine),
               ") on a shared reduction buffer: every rank must issue the "
               "same collectives in the same order, on the same view of its buffer (Note [Collective order] in "
               "dist/process_group.h)");
    }
  }

  // The op's elements in chunks of whole cache lines of the buffer (regions start on a page, so
  // the same lines in every copy), so no two ranks write one line, even for a view that starts
  // inside a line: chunk k starts k * chunk_elems() elements after the line the view starts in,
  // `before` elements of which precede the view.
  int64_t chunk_elems() const { return static_cast<int64_t>(kChunkBytes) / element_size_; }
  int64_t before() const { return static_cast<int64_t>(offset_ % kLine) / element_size_; }
  uint64_t chunks() const { return static_cast<uint64_t>((n_ + before() + chunk_elems() - 1) / chunk_elems()); }

  // Claims chunks until none is left, working on each: the rank that arrives first waits, so the
  // rank that arrives last -- the one the step waits for -- starts at once and does whatever the
  // others have not claimed by then, rather than wait for a sleeping peer to do its share.
  void work_on_unclaimed_chunks() {
    std::atomic_ref<uint64_t> claimed(buffer_->claimed().value);
    uint64_t next = claimed.load(std::memory_order_relaxed);
    while (next < end_chunk_) {
      // Only op s's chunks: a claim never moves the count past them (their sum is what the next op
      // starts from on every rank).
      if (!claimed.compare_exchange_weak(next, next + 1, std::memory_order_relaxed)) continue;
      const int64_t k = static_cast<int64_t>(next - first_chunk_);
      work(std::max<int64_t>(0, k * chunk_elems() - before()), std::min(n_, (k + 1) * chunk_elems() - before()));
      // Release: this chunk's writes into every copy happen before a rank sees it counted.
      counter(buffer_->completed().value).fetch_add(1, std::memory_order_release);
      next = claimed.load(std::memory_order_relaxed);
    }
  }

  std::shared_ptr<SharedBuffer> buffer_;  // keeps the mapping alive
  Tensor tensor_;                         // and the caller's view of it
  int32_t op_;                            // a ReduceOp, or kGatherOp
  int64_t n_;
  int64_t element_size_;
  uint64_t offset_;
  uint64_t s_;
  uint64_t first_chunk_, end_chunk_;  // this op's chunks in the segment's counts: [first, end)
  std::vector<std::byte*> copies_;    // the tensor's place in every rank's buffer, rank order
  bool worked_ = false;               // I have claimed my last chunk
  int waiting_for_ = 0;               // ranks below this one have arrived
};

// Elements [lo, hi) of every rank's copy (copies[q]: the tensor's first byte in rank q's buffer)
// reduced with op in rank order, as Note [Shared-memory AllReduce] sums, so the bits do not depend
// on who sums; the result written into every copy, or into copy `only` alone (>= 0).
template <class T>
void reduce_range(const std::vector<std::byte*>& copies, int64_t lo, int64_t hi, ReduceOp op, int only) {
  using Acc = compute_t<T>;
  const int N = static_cast<int>(copies.size());
  auto copy = [&](int q) { return reinterpret_cast<T*>(copies[q]); };
  alignas(64) Acc sum[kBlockElems];
  for (int64_t i = lo; i < hi; i += kBlockElems) {
    const int64_t m = std::min(kBlockElems, hi - i);
    combine_into(sum, copy(0) + i, N > 1 ? copy(1) + i : nullptr, m, op);
    for (int q = 2; q < N; ++q) combine_into(sum, sum, copy(q) + i, m, op);
    for (int q = 0; q < N; ++q)
      if (only < 0 || q == only) finish_into(copy(q) + i, sum, m, op, N);
  }
}

// An AllReduce: each element becomes op over every rank's copy, written into every copy.
template <class T>
class InPlaceAllreduce final : public InPlaceOp {
 public:
  InPlaceAllreduce(std::shared_ptr<SharedBuffer> buffer, const Tensor& t, ReduceOp op, int tag)
      : InPlaceOp(std::move(buffer), t, static_cast<int32_t>(op), tag), reduce_op_(op) {}

 private:
  T* copy(int q) const { return reinterpret_cast<T*>(copies()[q]); }

  void work(int64_t lo, int64_t hi) override {
    const int N = size();
    if constexpr (std::is_same_v<T, float>) {
      // DDP's case, 2 ranks and f32 sums or averages: one pass, no block round trip (the same
      // arithmetic as the blocks below: one addition, then the division by N).
      if (N == 2 && (reduce_op_ == ReduceOp::sum || reduce_op_ == ReduceOp::avg)) {
        float* a = copy(0);
        float* b = copy(1);
        if (reduce_op_ == ReduceOp::avg)
          for (int64_t i = lo; i < hi; ++i) a[i] = b[i] = (a[i] + b[i]) / 2.0f;
        else
          for (int64_t i = lo; i < hi; ++i) a[i] = b[i] = a[i] + b[i];
        return;
      }
    }
    reduce_range<T>(copies(), lo, hi, reduce_op_, /*only=*/-1);
  }

  ReduceOp reduce_op_;
};

// A reduce-scatter through this rank's buffer as staging (Note [Reduce-scatter through a shared
// buffer]): the input was copied into it before the op; each element is reduced over every rank's
// copy and written into its owner's copy alone, from which the owner copies its block out.
template <class T>
class StagedReduceScatter final : public InPlaceOp {
 public:
  StagedReduceScatter(std::shared_ptr<SharedBuffer> buffer, const Tensor& staged, const Tensor& output, ReduceOp op,
                      int tag)
      : InPlaceOp(std::move(buffer), staged, kScatterOps + static_cast<int32_t>(op), tag),
        staged_(staged),
        output_(output),
        block_(output.numel()),
        reduce_op_(op) {}

  bool poll() override {
    if (!InPlaceOp::poll()) return false;
    // Every chunk is done, so my block is final; nobody writes my buffer before I arrive again.
    // native::copy_: this runs on the communication thread, outside any caller's NoGradGuard
    // (Staging::staged in dist/staging.h).
    native::copy_(output_, staged_.narrow(0, rank() * block_, block_));
    return true;
  }

 private:
  void work(int64_t lo, int64_t hi) override {
    for (int64_t i = lo; i < hi;) {
      const int q = static_cast<int>(i / block_);  // the owner of element i
      const int64_t end = std::min(hi, (q + 1) * block_);
      reduce_range<T>(copies(), i, end, reduce_op_, q);
      i = end;
    }
  }

  Tensor staged_;  // (N m) in this rank's buffer
  Tensor output_;  // (m)
  int64_t block_;
  ReduceOp reduce_op_;
};

// A reduce-scatter of any size through the staging buffer, in rounds (Note [Reduce-scatter
// through a shared buffer]). input: N blocks of m elements; round k takes elements [k w, k w + w)
// of every block -- as many as fit, w = bytes / (N x element size) -- and stages them as N blocks of
// w, so that each round is a StagedReduceScatter whose block is a piece of this rank's output.
template <class T>
class ReduceScatterInRounds final : public PendingOp {
 public:
  ReduceScatterInRounds(std::shared_ptr<SharedBuffer> buffer, const Tensor& output, const Tensor& input, ReduceOp op,
                        int tag, int ranks)
      : buffer_(std::move(buffer)),
        output_(output),
        input_(input),
        op_(op),
        tag_(tag),
        ranks_(ranks),
        m_(output.numel()),
        w_(std::min<int64_t>(m_, static_cast<int64_t>(buffer_->bytes() / sizeof(T)) / ranks)),
        staging_(
            std::make_shared<Storage>(buffer_->mine(), buffer_->bytes(), Device::cpu(), [keep = buffer_](void*) {})) {
    if (m_ > 0) start_round();  // empty: nothing to stage, on every rank alike
  }

  bool poll() override {
    while (round_ != nullptr) {
      if (!round_->poll()) return false;
      round_.reset();
      done_ += w_;
      if (done_ < m_) start_round();
    }
    return true;
  }

 private:
  // Safe to write my buffer: the previous op on this segment is complete on every rank, and no rank
  // touches my buffer in the next one before I have arrived (after the copy).
  void start_round() {
    const int N = ranks_;
    const int64_t w = std::min(w_, m_ - done_);
    const Tensor staged = make_view(staging_, {N * w}, {1}, 0, input_.dtype());  // (N w)
    for (int q = 0; q < N; ++q) native::copy_(staged.narrow(0, q * w, w), input_.narrow(0, q * m_ + done_, w));
    round_ = std::make_unique<StagedReduceScatter<T>>(buffer_, staged, output_.narrow(0, done_, w), op_, tag_);
  }

  std::shared_ptr<SharedBuffer> buffer_;
  Tensor output_;  // (m)
  Tensor input_;   // (N m)
  ReduceOp op_;
  int tag_;
  int ranks_;
  int64_t m_, w_;
  std::shared_ptr<Storage> staging_;  // mine(), as storage every round's view shares
  int64_t done_ = 0;                  // elements of every block reduced by the finished rounds
  std::unique_ptr<PendingOp> round_;
};

// An allgather in place (Note [Allgather in a shared buffer]): the tensor is N blocks of m
// elements, block q written by rank q before the op; each element of block q is copied from rank
// q's copy into every other rank's.
class InPlaceAllgather final : public InPlaceOp {
 public:
  InPlaceAllgather(std::shared_ptr<SharedBuffer> buffer, const Tensor& t, int tag)
      : InPlaceOp(std::move(buffer), t, kGatherOp, tag), block_(t.numel() / size()), element_size_(t.element_size()) {}

 private:
  void work(int64_t lo, int64_t hi) override {
    const int N = size();
    for (int64_t i = lo; i < hi;) {
      const int q = static_cast<int>(i / block_);  // the owner of element i
      const int64_t end = std::min(hi, (q + 1) * block_);
      const std::byte* from = copies()[q] + i * static_cast<int64_t>(element_size_);
      const size_t bytes = static_cast<size_t>(end - i) * element_size_;
      for (int r = 0; r < N; ++r)
        if (r != q) std::memcpy(copies()[r] + i * static_cast<int64_t>(element_size_), from, bytes);
      i = end;
    }
  }

  int64_t block_;  // m
  size_t element_size_;
};

std::unique_ptr<PendingOp> SharedBuffer::allreduce(const Tensor& t, ReduceOp op, int tag) {
  return dispatch_dtype(t.dtype(), [&](auto zero) -> std::unique_ptr<PendingOp> {
    using T = decltype(zero);
    if constexpr (std::is_same_v<T, uint8_t>) {
      RG_FAIL("dist.allreduce", "u8 is not supported");  // rejected at submission already
    } else {
      return std::make_unique<InPlaceAllreduce<T>>(shared_from_this(), t, op, tag);
    }
  });
}

std::unique_ptr<PendingOp> SharedBuffer::reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op,
                                                        int tag) {
  RG_CHECK(input.numel() == output.numel() * size_ && output.is_contiguous() && rounds_fit(input.element_size()),
           "dist.reduce_scatter", "input ", input.desc(), " is not ", size_, " blocks of ", output.desc(),
           " that pass through the ", bytes_,
           "-byte staging buffer (at least one element of every block per round; "
           "rank ",
           rank_, ")");
  return dispatch_dtype(input.dtype(), [&](auto zero) -> std::unique_ptr<PendingOp> {
    using T = decltype(zero);
    if constexpr (std::is_same_v<T, uint8_t>) {
      RG_FAIL("dist.reduce_scatter", "u8 is not supported");  // rejected at submission already
    } else {
      return std::make_unique<ReduceScatterInRounds<T>>(shared_from_this(), output.view({-1}),
                                                        input.contiguous().view({-1}), op, tag, size_);
    }
  });
}

bool SharedBuffer::rounds_fit(size_t element_size) const { return bytes_ >= element_size * static_cast<size_t>(size_); }

std::unique_ptr<PendingOp> SharedBuffer::allgather(const Tensor& t, int tag) {
  RG_CHECK(t.numel() % size_ == 0, "dist.allgather", "a shared buffer's view of ", t.numel(), " elements is not ",
           size_, " equal blocks (rank ", rank_, ")");
  return std::make_unique<InPlaceAllgather>(shared_from_this(), t, tag);
}

}  // namespace ringgrad::dist::detail
