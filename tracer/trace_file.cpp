#include "tracer/trace_file.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "tracer/codec.h"
#include "tracer/flat_map.h"
#include "tracer/records.h"

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

bool TraceFile::open(const char* path, const char** error) {
  if (!buffer_) buffer_ = static_cast<uint8_t*>(mapPages(kBufferBytes));
  if (!buffer_) {
    *error = "cannot map the trace buffer";
    return false;
  }
  int fd = ::open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    last_errno_ = errno;
    *error = strerror(errno);
    return false;
  }
  uint8_t header[format::kFileHeaderSize];
  memcpy(header, format::kMagic, sizeof(format::kMagic));
  codec::putU32(header + 8, format::kVersion);
  codec::putU32(header + 12, 0);
  iovec iov{header, sizeof(header)};
  if (!writeAll(fd, &iov, 1, &last_errno_)) {
    *error = strerror(last_errno_);
    ::close(fd);
    return false;
  }
  fd_ = fd;
  used_ = 0;
  bytes_written_ = sizeof(header);
  strncpy(path_, path, sizeof(path_) - 1);
  return true;
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
