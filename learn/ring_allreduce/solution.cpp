// A solution of the ring exercise: the textbook ring, blocking, one chunk per step.
#include <cstdio>

#include "learn/ring_allreduce/ring_allreduce.h"

namespace learn {

int64_t ring_allreduce(std::vector<float>& data, MPI_Comm comm, bool verbose) {
  int N = 1, r = 0;
  MPI_Comm_size(comm, &N);
  MPI_Comm_rank(comm, &r);
  if (N == 1) return 0;
  const int right = (r + 1) % N, left = (r + N - 1) % N;
  // Chunk c is [begin(c), begin(c + 1)): N nearly equal parts.
  const int64_t S = static_cast<int64_t>(data.size());
  auto begin = [&](int c) { return S * c / N; };
  auto count = [&](int c) { return static_cast<int>(begin(c + 1) - begin(c)); };
  auto mod = [N](int c) { return ((c % N) + N) % N; };
  std::vector<float> incoming(static_cast<size_t>(S / N + 1));
  int64_t sent = 0;

  // Reduce-scatter: at step s rank r sends chunk r - s and adds the chunk r - s - 1 it receives.
  // After N - 1 steps rank r holds the whole sum of chunk r + 1.
  for (int s = 0; s < N - 1; ++s) {
    const int out = mod(r - s), in = mod(r - s - 1);
    MPI_Sendrecv(data.data() + begin(out), count(out), MPI_FLOAT, right, s, incoming.data(), count(in), MPI_FLOAT, left,
                 s, comm, MPI_STATUS_IGNORE);
    for (int i = 0; i < count(in); ++i) data[begin(in) + i] += incoming[i];
    sent += count(out) * static_cast<int64_t>(sizeof(float));
    if (verbose)
      std::printf(
          "rank %d  reduce-scatter step %d: sent chunk %d (%d floats) to rank %d, added chunk %d from rank %d\n", r, s,
          out, count(out), right, in, left);
  }
  // All-gather: at step s rank r sends the finished chunk r + 1 - s and stores chunk r - s.
  for (int s = 0; s < N - 1; ++s) {
    const int out = mod(r + 1 - s), in = mod(r - s);
    MPI_Sendrecv(data.data() + begin(out), count(out), MPI_FLOAT, right, N + s, data.data() + begin(in), count(in),
                 MPI_FLOAT, left, N + s, comm, MPI_STATUS_IGNORE);
    sent += count(out) * static_cast<int64_t>(sizeof(float));
    if (verbose)
      std::printf("rank %d  all-gather step %d: sent chunk %d to rank %d, stored chunk %d from rank %d\n", r, s, out,
                  right, in, left);
  }
  return sent;
}

}  // namespace learn
