#include "dist/shm/segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <random>

namespace ringgrad::dist::detail {

namespace {
uint64_t& nonce_of(std::byte* base) { return *reinterpret_cast<uint64_t*>(base); }
}  // namespace

uint64_t new_shm_nonce() { return std::random_device{}() * 0x9E3779B97F4A7C15ull ^ static_cast<uint64_t>(getpid()); }

std::string create_shm_segment(size_t bytes, uint64_t nonce, std::byte** base) {
  static std::atomic<int> counter{0};
  char name[64];
  int fd = -1;
  for (int attempt = 0; attempt < 8 && fd < 0; ++attempt) {
    std::snprintf(name, sizeof name, "/ringgrad-%d-%d", static_cast<int>(getpid()), counter++);
    fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0 && errno != EEXIST) return "";
  }
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
  nonce_of(*base) = nonce;
  return name;
}

std::byte* map_shm_segment(const char* name, size_t bytes, uint64_t nonce) {
  const int fd = shm_open(name, O_RDWR, 0);
  if (fd < 0) return nullptr;
  struct stat st {};
  void* p = fstat(fd, &st) == 0 && static_cast<size_t>(st.st_size) >= bytes
                ? mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                : MAP_FAILED;
  close(fd);
  if (p == MAP_FAILED) return nullptr;
  auto* base = static_cast<std::byte*>(p);
  if (nonce_of(base) != nonce) {
    munmap(p, bytes);
    return nullptr;
  }
  return base;
}

void unlink_shm_segment(const char* name) { shm_unlink(name); }

}  // namespace ringgrad::dist::detail
