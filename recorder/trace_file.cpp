#include "recorder/trace_file.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/file.h>
#include <sys/uio.h>
#include <unistd.h>

#include "format/codec.h"
#include "common/flat_map.h"
#include "format/records.h"

namespace memtrace {
namespace {

// Writes all of [iov, iov+count), retrying short writes and EINTR.
bool writeAll(int fd, iovec* iov, int count, int* error) {
  while (count > 0) {
    ssize_t written = writev(fd, iov, count);
    if (written < 0) {
      if (errno == EINTR) continue;
      *error = errno;
      return false;
    }
    auto left = static_cast<size_t>(written);
    while (count > 0 && left >= iov->iov_len) {
      left -= iov->iov_len;
      ++iov;
      --count;
    }
    if (count > 0) {
      iov->iov_base = static_cast<uint8_t*>(iov->iov_base) + left;
      iov->iov_len -= left;
    }
  }
  return true;
}

}  // namespace

// Note [Which process owns a trace file]
// A trace file is locked (flock) by the process writing it, for as long as that process
// lives. A process that finds the lock taken (a child started by a traced program with the
// same environment, a forked child, a concurrent run) writes elsewhere instead of
// truncating a live trace. A lock left by a process that ended is gone with it, so running
// the same command twice simply overwrites the old trace.
TraceFile::OpenResult TraceFile::open(const char* path, const char** error) {
  if (!buffer_) buffer_ = static_cast<uint8_t*>(mapPages(kBufferBytes));
  if (!buffer_) {
    *error = "cannot map the trace buffer";
    return OpenResult::kFailed;
  }
  int fd = ::open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    last_errno_ = errno;
    *error = strerror(errno);
    return OpenResult::kFailed;
  }
  if (flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK) {
    ::close(fd);
    return OpenResult::kBusy;
  }
  // Other flock errors (a file system without locks, a character device) only lose the
  // protection; the trace is written all the same.
  if (ftruncate(fd, 0) != 0 && errno != EINVAL) {
    last_errno_ = errno;
    *error = strerror(errno);
    ::close(fd);
    return OpenResult::kFailed;
  }
  uint8_t header[format::kFileHeaderSize];
  memcpy(header, format::kMagic, sizeof(format::kMagic));
  codec::putU32(header + 8, format::kVersion);
  codec::putU32(header + 12, 0);
  iovec iov{header, sizeof(header)};
  if (!writeAll(fd, &iov, 1, &last_errno_)) {
    *error = strerror(last_errno_);
    ::close(fd);
    return OpenResult::kFailed;
  }
  fd_ = fd;
  used_ = 0;
  bytes_written_ = sizeof(header);
  strncpy(path_, path, sizeof(path_) - 1);
  return OpenResult::kOpened;
}

uint8_t* TraceFile::reserve(size_t bytes) {
  if (fd_ < 0) return nullptr;
  if (used_ + bytes > kBufferBytes || used_ >= kFlushBytes) {
    if (!flush()) return nullptr;
  }
  return buffer_ + used_;
}

bool TraceFile::flush() {
  if (fd_ < 0) return false;
  if (used_ == 0) return true;
  uint8_t header[format::kChunkHeaderSize];
  codec::putU32(header, static_cast<uint32_t>(used_));
  codec::putU32(header + 4, codec::crc32c(buffer_, used_));
  codec::putU32(header + 8, codec::crc32c(header, 8));
  iovec iov[2] = {{header, sizeof(header)}, {buffer_, used_}};
  if (!writeAll(fd_, iov, 2, &last_errno_)) {
    // The file now ends in a partial chunk, which readers treat as a cut: everything
    // before it stays readable.
    ::close(fd_);
    fd_ = -1;
    used_ = 0;
    return false;
  }
  bytes_written_ += sizeof(header) + used_;
  used_ = 0;
  return true;
}

bool TraceFile::close() {
  bool ok = flush();
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  path_[0] = '\0';
  return ok;
}

void TraceFile::abandon() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  used_ = 0;
  path_[0] = '\0';
}

}  // namespace memtrace
