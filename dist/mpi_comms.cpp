#include "dist/mpi_comms.h"

#include <chrono>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/error.h"
#include "dist/mpi_check.h"
#include "dist/requests.h"

namespace ringgrad::dist::detail {

namespace {

// The debug fingerprint: fixed size, so one MPI_Iallgather exchanges every rank's.
constexpr int kFingerprintBytes = 192;

// Note [Debug mode]: all-gathers the fingerprints, compares, then runs the real collective.
class CheckedOp : public PendingOp {
 public:
  CheckedOp(const std::string& fingerprint, const std::string& where, MPI_Comm comm, int rank, int size,
            std::function<std::unique_ptr<PendingOp>()> start_real)
      : where_(where),
        rank_(rank),
        size_(size),
        mine_(kFingerprintBytes, '\0'),
        all_(static_cast<size_t>(kFingerprintBytes) * size, '\0'),
        start_real_(std::move(start_real)) {
    fingerprint.copy(mine_.data(), kFingerprintBytes - 1);
    RG_MPI_CHECK(MPI_Iallgather(mine_.data(), kFingerprintBytes, MPI_CHAR, all_.data(), kFingerprintBytes, MPI_CHAR,
                                comm, &request_));
  }

  bool poll() override {
    if (!real_) {
      int done = 0;
      RG_MPI_CHECK(MPI_Test(&request_, &done, MPI_STATUS_IGNORE));
      if (!done) return false;
      compare();
      real_ = start_real_();
    }
    return real_->poll();
  }
  void abandon() override {
    if (real_) real_->abandon();  // an unfinished MPI_Iallgather cannot be cancelled; it is leaked
  }

 private:
  std::string view(int r) const { return std::string(all_.data() + static_cast<size_t>(r) * kFingerprintBytes); }

  void compare() const {
    int first = -1;
    for (int r = 1; r < size_ && first < 0; ++r)
      if (view(r) != view(0)) first = r;
    if (first < 0) return;
    std::string views;
    for (int r = 0; r < size_; ++r) {
      if (r == 16 && size_ > 17) {
        views += str_cat("\n  ... (", size_ - 17, " more ranks)");
        r = size_ - 1;
      }
      views += str_cat("\n  rank ", r, ": ", view(r), r == first ? "   <-- first to differ from rank 0" : "");
    }
    RG_FAIL("dist.debug", "ranks disagree on ", where_, " (seen by rank ", rank_, "/", size_, "):", views,
            "\nEvery rank must issue the same collectives, with the same shapes and dtypes, in the same order "
            "(Note [Collective order] in dist/process_group.h).");
  }

  std::string where_;
  int rank_, size_;
  std::vector<char> mine_, all_;
  MPI_Request request_ = MPI_REQUEST_NULL;
  std::function<std::unique_ptr<PendingOp>()> start_real_;
  std::unique_ptr<PendingOp> real_;
};

// A receive that checks the message filled the tensor exactly.
class RecvOp : public PendingOp {
 public:
  RecvOp(const Tensor& t, int src, int tag, MPI_Comm comm) : tensor_(t), src_(src), tag_(tag) {
    RG_MPI_CHECK(MPI_Irecv(t.raw_data(), static_cast<int>(t.nbytes()), MPI_BYTE, src, tag, comm, &request_));
  }
  bool poll() override {
    int done = 0;
    MPI_Status status{};
    // A single-request MPI_Test reports errors in its return value only (status.MPI_ERROR is not
    // set); the communicator returns errors (MPI_ERRORS_RETURN) rather than aborting.
    const int rc = MPI_Test(&request_, &done, &status);
    if (rc != MPI_SUCCESS) {
      int cls = 0;
      MPI_Error_class(rc, &cls);
      RG_CHECK(cls != MPI_ERR_TRUNCATE, "dist.recv", "the message from rank ", src_, " (tag ", tag_,
               ") is larger than the receiving tensor ", tensor_.desc(), " of ", tensor_.nbytes(), " bytes");
      RG_MPI_CHECK(rc);
    }
    if (!done) return false;
    int count = 0;
    MPI_Get_count(&status, MPI_BYTE, &count);
    RG_CHECK(static_cast<size_t>(count) == tensor_.nbytes(), "dist.recv", "the message from rank ", src_, " (tag ",
             tag_, ") has ", count, " bytes but the receiving tensor ", tensor_.desc(), " has ", tensor_.nbytes());
    return true;
  }
  void abandon() override { abandon_request(request_, true); }

 private:
  Tensor tensor_;
  int src_, tag_;
  MPI_Request request_ = MPI_REQUEST_NULL;
};

}  // namespace

bool wait_within(MPI_Request* requests, int count, double timeout_seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_seconds);
  for (int done = 0;;) {
    RG_MPI_CHECK(MPI_Testall(count, requests, &done, MPI_STATUSES_IGNORE));
    if (done) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

MpiComms::MpiComms(double timeout_seconds, const std::string& description) {
  // MPI_Comm_idup rather than MPI_Comm_dup: a rank that never creates this group must make the
  // others fail after the timeout, not block them forever (Note [Agreed at creation]).
  MPI_Request requests[3];
  MPI_Comm* comms[3] = {&comm_, &p2p_comm_, &debug_comm_};
  for (int i = 0; i < 3; ++i) RG_MPI_CHECK(MPI_Comm_idup(MPI_COMM_WORLD, comms[i], &requests[i]));
  if (!wait_within(requests, 3, timeout_seconds)) {
    int world_rank = 0, world_size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);
    RG_FAIL("dist.new_group", "rank ", world_rank, "/", world_size, " waited ", timeout_seconds,
            " s for every rank to create ", description,
            ": some rank did not create it -- every rank must create the same groups in the same order -- or died");
  }
  for (MPI_Comm* c : comms) RG_MPI_CHECK(MPI_Comm_set_errhandler(*c, MPI_ERRORS_RETURN));
  RG_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  RG_MPI_CHECK(MPI_Comm_size(comm_, &size_));
}

void MpiComms::free() {
  for (MPI_Comm* c : {&comm_, &p2p_comm_, &debug_comm_}) MPI_Comm_free(c);  // no throw from a destructor
}

std::unique_ptr<PendingOp> MpiComms::start_barrier() const {
  MPI_Request request;
  RG_MPI_CHECK(MPI_Ibarrier(comm_, &request));
  return std::make_unique<RequestsOp>(std::vector<MPI_Request>{request}, nullptr, std::vector<Tensor>{});
}

std::unique_ptr<PendingOp> MpiComms::start_send(const Tensor& host, int dst, int tag) const {
  MPI_Request request;
  RG_MPI_CHECK(MPI_Isend(host.raw_data(), static_cast<int>(host.nbytes()), MPI_BYTE, dst, tag, p2p_comm_, &request));
  return std::make_unique<RequestsOp>(std::vector<MPI_Request>{request}, nullptr, std::vector<Tensor>{host});
}

std::unique_ptr<PendingOp> MpiComms::start_recv(const Tensor& host, int src, int tag) const {
  return std::make_unique<RecvOp>(host, src, tag, p2p_comm_);
}

std::unique_ptr<PendingOp> MpiComms::start_checked(const std::string& fingerprint, const std::string& where,
                                                   std::function<std::unique_ptr<PendingOp>()> start_real) const {
  return std::make_unique<CheckedOp>(fingerprint, where, debug_comm_, rank_, size_, std::move(start_real));
}

}  // namespace ringgrad::dist::detail
