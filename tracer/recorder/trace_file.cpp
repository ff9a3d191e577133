#include "tracer/recorder/trace_file.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/uio.h>
#include <unistd.h>

#include "tracer/common/flat_map.h"
#include "tracer/format/codec.h"
#include "tracer/format/records.h"

namespace memtrace {
namespace {

size_t totalBytes(const iovec* iov, int count) {
  size_t total = 0;
  for (int i = 0; i < count; ++i) total += iov[i].iov_len;
  return total;
}

// Whether `end` (a file size) is within RLIMIT_FSIZE; *error = EFBIG when it is not.
bool withinFileSizeLimit(uint64_t end, int* error) {
  rlimit limit;
  if (getrlimit(RLIMIT_FSIZE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY ||
      end <= limit.rlim_cur)
    return true;
  *error = EFBIG;
  return false;
}

void truncateTo(int fd, uint64_t size) {
  while (ftruncate(fd, static_cast<off_t>(size)) != 0 && errno == EINTR) {
  }
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
  fd_ = fd;
  seekable_ = lseek(fd, 0, SEEK_CUR) >= 0;
  if (!writeAt(0, &iov, 1)) {
    *error = strerror(last_errno_);
    ::close(fd);
    fd_ = -1;
    return OpenResult::kFailed;
  }
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
  if (!writeAt(bytes_written_, iov, 2)) {
    ::close(fd_);
    fd_ = -1;
    used_ = 0;
    return false;
  }
  bytes_written_ += sizeof(header) + used_;
  used_ = 0;
  return true;
}

bool TraceFile::writeAt(uint64_t offset, iovec* iov, int count) {
  if (!withinFileSizeLimit(offset + totalBytes(iov, count), &last_errno_)) return false;
  uint64_t at = offset;
  while (count > 0) {
    // A pipe (MEMTRACE_OUTPUT=/dev/stdout) has no offsets: it is written in order.
    ssize_t written =
        seekable_ ? pwritev(fd_, iov, count, static_cast<off_t>(at)) : writev(fd_, iov, count);
    if (written < 0 && errno == EINTR) continue;
    if (written <= 0) {
      last_errno_ = written < 0 ? errno : EIO;
      // Where truncating fails (a device, a pipe) the partial chunk stays: readers then
      // stop at it, as at the end of a killed writer's file.
      if (at != offset && seekable_) truncateTo(fd_, offset);
      return false;
    }
    at += static_cast<uint64_t>(written);
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
