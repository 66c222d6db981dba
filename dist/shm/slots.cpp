#include "dist/shm/slots.h"

#include <sys/mman.h>

#include <atomic>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <string>
#include <type_traits>

#include "core/error.h"
#include "dist/algorithms/reduce_kernels.h"
#include "dist/mpi_check.h"
#include "dist/shm/segment.h"

namespace ringgrad::dist::detail {

// One parity of a rank's slot: the op that last published it, what that op is, then the data,
// from byte 32 on. Note [One line to wait for]: the counter a peer polls shares its cache line with
// the header and the first 32 bytes of data, so when the counter arrives at a waiting rank, a small
// op's whole payload arrives with it: one cross-core transfer instead of a counter, then the rest.
struct SharedSlots::Header {
  uint64_t posted;  // the op number s last published here (atomic_ref: written with release)
  int64_t tag;      // the op's tag (its collective number mod 32768)
  uint64_t bytes;   // accumulation-type bytes of the data
  int32_t dtype;    // the tensor's DType
  int32_t op;       // the ReduceOp
};

namespace {

constexpr size_t kLine = 64;
constexpr size_t kHeaderBytes = 32;                        // the data starts here (Note [One line to wait for])
constexpr size_t kParityBytes = kLine + kSharedSlotBytes;  // header + data, rounded to whole lines
// Each rank's slot, page-aligned, after a first page that holds the segment's nonce.
constexpr size_t kSlotBytes = (2 * kParityBytes + 4095) / 4096 * 4096;
constexpr size_t kFirstPage = 4096;
// The counters are shared between processes: that needs atomics that are lock-free (address-free).
static_assert(std::atomic_ref<uint64_t>::is_always_lock_free);

std::byte* parity_of(std::byte* slot, uint64_t op) { return slot + (op % 2) * kParityBytes; }
// The parity's `posted` counter: the first 8 bytes of its header.
std::atomic_ref<uint64_t> posted(std::byte* parity) {
  return std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(parity));
}

// Accumulation-type bytes of t: f16 / bf16 travel as f32.
size_t accumulation_bytes(const Tensor& t) {
  const bool half = t.dtype() == DType::f16 || t.dtype() == DType::bf16;
  return half ? static_cast<size_t>(t.numel()) * sizeof(float) : t.nbytes();
}

}  // namespace

std::unique_ptr<SharedSlots> SharedSlots::create(MPI_Comm comm, int rank, int size) {
  if (size < 2) return nullptr;
  MPI_Comm local = MPI_COMM_NULL;
  RG_MPI_CHECK(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local));
  int local_size = 0;
  RG_MPI_CHECK(MPI_Comm_size(local, &local_size));
  RG_MPI_CHECK(MPI_Comm_free(&local));
  if (local_size != size) return nullptr;  // the group spans machines: every rank sees that

  const size_t bytes = kFirstPage + kSlotBytes * static_cast<size_t>(size);
  std::byte* base = nullptr;
  struct {
    char name[64] = {};  // "" tells the others that rank 0 failed
    uint64_t nonce = 0;
  } segment;
  if (rank == 0) {
    segment.nonce = new_shm_nonce();
    std::snprintf(segment.name, sizeof segment.name, "%s", create_shm_segment(bytes, segment.nonce, &base).c_str());
  }
  RG_MPI_CHECK(MPI_Bcast(&segment, sizeof segment, MPI_BYTE, 0, comm));
  const char* name = segment.name;
  if (rank != 0 && name[0] != '\0') base = map_shm_segment(name, bytes, segment.nonce);
  int mapped = base != nullptr, all_mapped = 0;
  RG_MPI_CHECK(MPI_Allreduce(&mapped, &all_mapped, 1, MPI_INT, MPI_MIN, comm));
  // Everyone who could map it has: the name can go, the memory stays until the last munmap.
  if (rank == 0 && name[0] != '\0') unlink_shm_segment(name);
  if (!all_mapped) {
    if (base != nullptr) munmap(base, bytes);
    return nullptr;
  }
  return std::unique_ptr<SharedSlots>(new SharedSlots(base, bytes, rank, size));
}

SharedSlots::SharedSlots(std::byte* base, size_t bytes, int rank, int size)
    : base_(base + kFirstPage), mapping_(base), bytes_(bytes), stride_(kSlotBytes), rank_(rank), size_(size) {
  static_assert(sizeof(Header) == kHeaderBytes && offsetof(Header, posted) == 0,
                "the header is the first 32 bytes of a parity's first line, `posted` first");
}

// Local: the other ranks keep their own mappings (and a rank still waiting in an op that timed
// out only ever reads its peers' slots through its own mapping).
SharedSlots::~SharedSlots() { munmap(mapping_, bytes_); }

bool SharedSlots::fits(const Tensor& t) {
  const size_t bytes = accumulation_bytes(t);
  return bytes > 0 && bytes <= kSharedSlotBytes;
}

// One AllReduce through the slots (Note [Shared-memory AllReduce]). t: (n) viewed flat.
template <class T>
class SharedAllreduce final : public PendingOp {
  using Acc = compute_t<T>;

 public:
  SharedAllreduce(SharedSlots& slots, const Tensor& t, ReduceOp op, int tag, Acc* sum)
      : slots_(slots),
        tensor_(t),
        op_(op),
        n_(t.numel()),
        data_(static_cast<T*>(t.raw_data())),
        sum_(sum),
        tag_(tag),
        op_number_(slots.ops_ + 1) {
    // The two-parity argument of the Note needs the previous op finished before this one starts
    // (the communication thread runs one collective at a time): check it rather than trust it.
    RG_CHECK(slots_.finished_ == slots_.ops_, "dist.allreduce", "shared-memory op ", op_number_, " started before op ",
             slots_.ops_, " finished (rank ", slots_.rank_, ")");
    slots_.ops_ = op_number_;
    std::byte* mine = parity_of(slots_.slot_of(slots_.rank_), op_number_);
    auto* header = reinterpret_cast<SharedSlots::Header*>(mine);
    header->tag = tag_;
    header->bytes = static_cast<uint64_t>(n_) * sizeof(Acc);
    header->dtype = static_cast<int32_t>(t.dtype());
    header->op = static_cast<int32_t>(op);
    widen(reinterpret_cast<Acc*>(mine + kHeaderBytes), data_, n_);
    posted(mine).store(op_number_, std::memory_order_release);
  }

  bool poll() override {
    for (; waiting_for_ < slots_.size_; ++waiting_for_)
      if (posted(parity_of(slots_.slot_of(waiting_for_), op_number_)).load(std::memory_order_acquire) < op_number_)
        return false;
    const SharedSlots::Header& mine = *header_of(slots_.rank_);
    for (int r = 0; r < slots_.size_; ++r) {
      const SharedSlots::Header& theirs = *header_of(r);
      RG_CHECK(theirs.tag == mine.tag && theirs.bytes == mine.bytes && theirs.dtype == mine.dtype &&
                   theirs.op == mine.op,
               "dist.allreduce", "rank ", r, " is at another collective (", describe(theirs), ") than rank ",
               slots_.rank_, " (", describe(mine),
               "): every rank must issue the same collectives in the same "
               "order (Note [Collective order] in dist/process_group.h; RINGGRAD_DIST_DEBUG=1 names the first that "
               "differs)");
    }
    // Every rank adds the same slots in the same order: identical bits everywhere.
    std::memcpy(sum_, data_of(0), static_cast<size_t>(n_) * sizeof(Acc));
    for (int r = 1; r < slots_.size_; ++r) reduce_into(sum_, data_of(r), n_, op_);
    if (!std::is_same_v<T, Acc> || op_ == ReduceOp::avg) finish_into(data_, sum_, n_, op_, slots_.size_);
    slots_.finished_ = op_number_;
    return true;
  }

 private:
  static std::string describe(const SharedSlots::Header& h) {
    return str_cat("tag ", h.tag, ", ", dtype_name(static_cast<DType>(h.dtype)), " ",
                   reduce_op_name(static_cast<ReduceOp>(h.op)), ", ", h.bytes, " bytes");
  }

  const SharedSlots::Header* header_of(int r) const {
    return reinterpret_cast<const SharedSlots::Header*>(parity_of(slots_.slot_of(r), op_number_));
  }
  const Acc* data_of(int r) const {
    return reinterpret_cast<const Acc*>(parity_of(slots_.slot_of(r), op_number_) + kHeaderBytes);
  }

  SharedSlots& slots_;
  Tensor tensor_;  // keeps the storage alive
  ReduceOp op_;
  int64_t n_;
  T* data_;
  Acc* sum_;  // (n): data_ itself when T == Acc, else scratch
  int tag_;
  uint64_t op_number_;
  int waiting_for_ = 0;  // ranks below this one have published op_number_
};

std::unique_ptr<PendingOp> SharedSlots::allreduce(const Tensor& t, ReduceOp op, int tag, Scratch& scratch) {
  return dispatch_dtype(t.dtype(), [&](auto zero) -> std::unique_ptr<PendingOp> {
    using T = decltype(zero);
    if constexpr (std::is_same_v<T, uint8_t>) {
      RG_FAIL("dist.allreduce", "u8 is not supported");  // rejected at submission already
    } else {
      using Acc = compute_t<T>;
      Acc* sum = std::is_same_v<T, Acc> ? reinterpret_cast<Acc*>(t.raw_data())
                                        : reinterpret_cast<Acc*>(scratch.get(0, accumulation_bytes(t)));
      return std::make_unique<SharedAllreduce<T>>(*this, t, op, tag, sum);
    }
  });
}

}  // namespace ringgrad::dist::detail
