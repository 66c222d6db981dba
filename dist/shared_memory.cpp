#include "dist/shared_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <type_traits>

#include "core/error.h"
#include "dist/mpi_check.h"
#include "dist/reduce_kernels.h"

namespace ringgrad::dist::detail {

// One parity of a rank's slot: who wrote it, then the data (64-byte aligned).
struct SharedSlots::Header {
  int64_t tag;     // the op's tag (its collective number mod 32768)
  uint64_t bytes;  // accumulation-type bytes of the data
};

namespace {

constexpr size_t kLine = 64;  // one cache line: the posted counter never shares one with data
constexpr size_t kParityBytes = kLine + kSharedSlotBytes;
constexpr size_t kSlotBytes = (kLine + 2 * kParityBytes + 4095) / 4096 * 4096;

std::atomic_ref<uint64_t> posted(std::byte* slot) { return std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(slot)); }
std::byte* parity_of(std::byte* slot, uint64_t op) { return slot + kLine + (op % 2) * kParityBytes; }

// Accumulation-type bytes of t: f16 / bf16 travel as f32.
size_t accumulation_bytes(const Tensor& t) {
  const bool half = t.dtype() == DType::f16 || t.dtype() == DType::bf16;
  return half ? static_cast<size_t>(t.numel()) * sizeof(float) : t.nbytes();
}

// Rank 0 creates the segment; "" when it could not.
std::string create_segment(size_t bytes, std::byte** base) {
  static std::atomic<int> counter{0};
  char name[64];
  std::snprintf(name, sizeof name, "/ringgrad-%d-%d", static_cast<int>(getpid()), counter++);
  const int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) return "";
  // posix_fallocate, not ftruncate: a full /dev/shm is an error here, not a SIGBUS at first touch.
  void* p = posix_fallocate(fd, 0, static_cast<off_t>(bytes)) == 0
                ? mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                : MAP_FAILED;
  close(fd);
  if (p == MAP_FAILED) {
    shm_unlink(name);
    return "";
  }
  *base = static_cast<std::byte*>(p);
  return name;
}

std::byte* map_segment(const char* name, size_t bytes) {
  const int fd = shm_open(name, O_RDWR, 0);
  if (fd < 0) return nullptr;
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  return p == MAP_FAILED ? nullptr : static_cast<std::byte*>(p);
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

  const size_t bytes = kSlotBytes * static_cast<size_t>(size);
  std::byte* base = nullptr;
  char name[64] = {};  // "" tells the others that rank 0 failed
  if (rank == 0) std::snprintf(name, sizeof name, "%s", create_segment(bytes, &base).c_str());
  RG_MPI_CHECK(MPI_Bcast(name, sizeof name, MPI_CHAR, 0, comm));
  if (rank != 0 && name[0] != '\0') base = map_segment(name, bytes);
  int mapped = base != nullptr, all_mapped = 0;
  RG_MPI_CHECK(MPI_Allreduce(&mapped, &all_mapped, 1, MPI_INT, MPI_MIN, comm));
  // Everyone who could map it has: the name can go, the memory stays until the last munmap.
  if (rank == 0 && name[0] != '\0') shm_unlink(name);
  if (!all_mapped) {
    if (base != nullptr) munmap(base, bytes);
    return nullptr;
  }
  return std::unique_ptr<SharedSlots>(new SharedSlots(base, bytes, rank, size));
}

SharedSlots::SharedSlots(std::byte* base, size_t bytes, int rank, int size)
    : base_(base), bytes_(bytes), stride_(kSlotBytes), rank_(rank), size_(size) {}

// Local: the other ranks keep their own mappings (and a rank still waiting in an op that timed
// out only ever reads its peers' slots through its own mapping).
SharedSlots::~SharedSlots() { munmap(base_, bytes_); }

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
      : slots_(slots), tensor_(t), op_(op), n_(t.numel()), data_(static_cast<T*>(t.raw_data())), sum_(sum),
        tag_(tag), op_number_(++slots.ops_) {
    std::byte* mine = parity_of(slots_.slot_of(slots_.rank_), op_number_);
    auto* header = reinterpret_cast<SharedSlots::Header*>(mine);
    header->tag = tag_;
    header->bytes = static_cast<uint64_t>(n_) * sizeof(Acc);
    widen(reinterpret_cast<Acc*>(mine + kLine), data_, n_);
    posted(slots_.slot_of(slots_.rank_)).store(op_number_, std::memory_order_release);
  }

  bool poll() override {
    for (; waiting_for_ < slots_.size_; ++waiting_for_)
      if (posted(slots_.slot_of(waiting_for_)).load(std::memory_order_acquire) < op_number_) return false;
    const SharedSlots::Header& mine = *header_of(slots_.rank_);
    for (int r = 0; r < slots_.size_; ++r) {
      const SharedSlots::Header& theirs = *header_of(r);
      RG_CHECK(theirs.tag == mine.tag && theirs.bytes == mine.bytes, "dist.allreduce", "rank ", r,
               " is at another collective (tag ", theirs.tag, ", ", theirs.bytes, " bytes) than rank ", slots_.rank_,
               " (tag ", mine.tag, ", ", mine.bytes, " bytes): every rank must issue the same collectives in the same "
               "order (Note [Collective order] in dist/process_group.h; RINGGRAD_DIST_DEBUG=1 names the first that "
               "differs)");
    }
    // Every rank adds the same slots in the same order: identical bits everywhere.
    std::memcpy(sum_, data_of(0), static_cast<size_t>(n_) * sizeof(Acc));
    for (int r = 1; r < slots_.size_; ++r) reduce_into(sum_, data_of(r), n_, op_);
    if (!std::is_same_v<T, Acc> || op_ == ReduceOp::avg) finish_into(data_, sum_, n_, op_, slots_.size_);
    return true;
  }

 private:
  const SharedSlots::Header* header_of(int r) const {
    return reinterpret_cast<const SharedSlots::Header*>(parity_of(slots_.slot_of(r), op_number_));
  }
  const Acc* data_of(int r) const {
    return reinterpret_cast<const Acc*>(parity_of(slots_.slot_of(r), op_number_) + kLine);
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
