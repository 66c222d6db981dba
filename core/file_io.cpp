#include "core/file_io.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "core/error.h"

namespace ringgrad {

std::string read_whole_file(const std::string& path, const char* op) {
  std::error_code ec;
  RG_CHECK(!std::filesystem::is_directory(path, ec), op, path, " is a directory, not a file");
  std::ifstream in(path, std::ios::binary);
  RG_CHECK(in.good(), op, "cannot open ", path, ": ", std::strerror(errno));
  std::string bytes;
  try {
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  } catch (const std::exception& e) {
    RG_FAIL(op, "reading ", path, " failed: ", e.what());
  }
  RG_CHECK(!in.bad(), op, "reading ", path, " failed: ", std::strerror(errno));
  return bytes;
}

void write_file_atomically(const std::string& path, std::string_view bytes, const char* op) {
  const std::string tmp = temporary_path(path);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  RG_CHECK(fd >= 0, op, "cannot create ", tmp, ": ", std::strerror(errno));
  size_t written = 0;
  while (written < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + written, bytes.size() - written);
    if (n <= 0) {
      const int err = errno;
      ::close(fd);
      std::remove(tmp.c_str());
      RG_FAIL(op, "writing ", tmp, " failed after ", written, " of ", bytes.size(), " bytes: ", std::strerror(err),
              "; ", path, " was left as it was");
    }
    written += static_cast<size_t>(n);
  }
  // The data must be on disk before the rename makes it the file. A failure at either step removes
  // the temporary file: what stays is the previous file, untouched, and nothing else.
  const bool synced = ::fsync(fd) == 0;
  const int sync_error = errno;
  const bool closed = ::close(fd) == 0;  // NFS may report a failed write only here
  const int close_error = errno;
  if (!synced || !closed) {
    std::remove(tmp.c_str());
    RG_FAIL(op, synced ? "closing " : "fsync of ", tmp, " failed: ", std::strerror(synced ? close_error : sync_error),
            "; ", path, " was left as it was");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    RG_FAIL(op, "renaming ", tmp, " to ", path, " failed: ", std::strerror(err), "; ", path, " was left as it was");
  }
}

}  // namespace ringgrad
