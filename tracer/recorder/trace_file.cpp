#include "tracer/recorder/trace_file.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "tracer/common/flat_map.h"
#include "tracer/format/codec.h"
#include "tracer/format/records.h"

namespace memtrace {
namespace {

constexpr size_t kHeader = format::kChunkHeaderSize;
constexpr uint64_t kPage = 4096;  // mmap offsets are multiples of it on every Linux we run on
// The largest record (reserve()'s bound): a window keeps at least this much room after the
// open chunk's records.
constexpr size_t kLargestRecord = TraceFile::kBufferBytes - TraceFile::kFlushBytes;

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

uint64_t roundUpToPage(uint64_t bytes) {
  return (bytes + kPage - 1) & ~(kPage - 1);
}

}  // namespace

// Note [Which process owns a trace file]
// A trace file is locked (flock) by the process writing it, for as long as that process
// lives. A process that finds the lock taken (a child started by a traced program with the
// same environment, a forked child, a concurrent run) writes elsewhere instead of
// truncating a live trace. A lock left by a process that ended is gone with it, so running
// the same command twice simply overwrites the old trace.
TraceFile::OpenResult TraceFile::open(const char* path, const char** error, uint32_t flags,
                                      bool allow_mapping) {
  int fd = ::open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  // A pipe or a device may be write-only (/dev/stdout of a shell redirection).
  if (fd < 0 && (errno == EACCES || errno == EISDIR || errno == EROFS))
    fd = ::open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
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
  codec::putU32(header + 12, flags);
  iovec iov{header, sizeof(header)};
  fd_ = fd;
  setEventLimit();
  seekable_ = lseek(fd, 0, SEEK_CUR) >= 0;
  if (!writeAt(0, &iov, 1)) {
    *error = strerror(last_errno_);
    ::close(fd);
    fd_ = -1;
    setEventLimit();
    return OpenResult::kFailed;
  }
  used_ = 0;
  bytes_written_ = allocated_ = sizeof(header);
  window_bytes_ = kWindowBytes;
  struct stat info;
  bool regular = fstat(fd, &info) == 0 && S_ISREG(info.st_mode);
  regular_ = regular;
  // Mapping is tried first; a file it cannot serve (see the Note) is written through the
  // buffer, silently: that is how every trace was written before.
  if (!(allow_mapping && regular && mapWindow(window_bytes_))) {
    if (!buffer_) buffer_ = static_cast<uint8_t*>(mapPages(kBufferBytes));
    if (!buffer_) {
      *error = "cannot map the trace buffer";
      ::close(fd);
      fd_ = -1;
      setEventLimit();
      return OpenResult::kFailed;
    }
    pointAtBuffer();
  }
  last_errno_ = 0;
  strncpy(path_, path, sizeof(path_) - 1);
  return OpenResult::kOpened;
}

void TraceFile::pointAtBuffer() {
  payload_ = buffer_;
  capacity_ = kBufferBytes;
  setEventLimit();
}

bool TraceFile::mapWindow(size_t window) {
  uint64_t offset = bytes_written_ & ~(kPage - 1);
  uint64_t end = roundUpToPage(bytes_written_ + kHeader + window);
  if (end < bytes_written_ + kHeader + kLargestRecord)
    end = roundUpToPage(bytes_written_ + kHeader + kLargestRecord);
  int error = 0;
  if (!withinFileSizeLimit(end, &error)) {
    last_errno_ = error;
    return false;
  }
  if (end > allocated_) {
    int result;
    while ((result = fallocate(fd_, 0, static_cast<off_t>(allocated_),
                               static_cast<off_t>(end - allocated_))) != 0 &&
           errno == EINTR) {
    }
    if (result != 0) {
      last_errno_ = errno;
      return false;
    }
    allocated_ = end;
  }
  void* mapping = mmap(nullptr, end - offset, PROT_READ | PROT_WRITE, MAP_SHARED, fd_,
                       static_cast<off_t>(offset));
  if (mapping == MAP_FAILED) {
    last_errno_ = errno;
    return false;
  }
  unmap();
  map_later_ = false;
  map_ = static_cast<uint8_t*>(mapping);
  map_offset_ = offset;
  map_bytes_ = end - offset;
  payload_ = map_ + (bytes_written_ - offset) + kHeader;
  size_t room = map_bytes_ - (bytes_written_ - offset) - kHeader;
  capacity_ = room < kBufferBytes ? room : kBufferBytes;
  setEventLimit();
  return true;
}

void TraceFile::unmap() {
  if (map_) munmap(map_, map_bytes_);
  map_ = nullptr;
  map_bytes_ = 0;
}

bool TraceFile::stopMapping() {
  unmap();
  map_later_ = false;
  truncateTo(fd_, bytes_written_);
  allocated_ = bytes_written_;
  if (!buffer_) buffer_ = static_cast<uint8_t*>(mapPages(kBufferBytes));
  if (!buffer_) {
    last_errno_ = ENOMEM;
    return false;
  }
  pointAtBuffer();
  return true;
}

uint8_t* TraceFile::reserveSlow(size_t bytes) {
  if (fd_ < 0 || !flush()) return nullptr;
  if (map_later_ && !mapWindow(window_bytes_) && !stopMapping()) return nullptr;
  if (used_ + bytes > capacity_) return nullptr;  // larger than any record
  return payload_ + used_;
}

void TraceFile::closeMappedChunk() {
  if (used_ == 0) return;
  uint8_t* header = payload_ - kHeader;
  uint8_t fields[8];
  codec::putU32(fields, static_cast<uint32_t>(used_));
  codec::putU32(fields + 4, codec::crc32c(payload_, used_));
  uint8_t checksum[4];
  codec::putU32(checksum, codec::crc32c(fields, 8));
  // The checksums first, the size last and in one store (Note [Records reach the page cache
  // as they are written]).
  memcpy(header + 4, fields + 4, 4);
  memcpy(header + 8, checksum, 4);
  __atomic_signal_fence(__ATOMIC_RELEASE);
  uint32_t size_field;
  memcpy(&size_field, fields, 4);
  memcpy(header, &size_field, 4);
  bytes_written_ += kHeader + used_;
  payload_ += used_ + kHeader;
  used_ = 0;
}

bool TraceFile::flush() {
  if (fd_ < 0) return false;
  if (map_later_) return true;  // nothing written since the file was cut (trimForExit)
  if (map_) {
    closeMappedChunk();
    uint64_t map_end = map_offset_ + map_bytes_;
    uint64_t room = map_end > bytes_written_ + kHeader ? map_end - bytes_written_ - kHeader : 0;
    capacity_ = room < kBufferBytes ? static_cast<size_t>(room) : kBufferBytes;
    setEventLimit();
    // A window too short for the largest record (or, in the steady state, for a whole open
    // chunk) moves on; one that cannot ends the mapping.
    size_t wanted = window_bytes_ == kWindowBytes ? kBufferBytes : kLargestRecord;
    if (capacity_ < wanted && !mapWindow(window_bytes_) && !stopMapping()) {
      closeAfterFailure();
      return false;
    }
    return true;
  }
  if (used_ == 0) return true;
  uint8_t header[kHeader];
  codec::putU32(header, static_cast<uint32_t>(used_));
  codec::putU32(header + 4, codec::crc32c(buffer_, used_));
  codec::putU32(header + 8, codec::crc32c(header, 8));
  iovec iov[2] = {{header, sizeof(header)}, {buffer_, used_}};
  if (!writeAt(bytes_written_, iov, 2)) {
    ::close(fd_);
    fd_ = -1;
    setEventLimit();
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

bool TraceFile::trimForExit() {
  if (fd_ < 0) return false;
  if (!flush()) return false;
  if (!map_) return true;
  // Unmapped first: nothing stays mapped past the file's end (a store there would raise
  // SIGBUS).
  unmap();
  truncateTo(fd_, bytes_written_);
  allocated_ = bytes_written_;
  window_bytes_ = kExitWindowBytes;
  map_later_ = true;
  payload_ = nullptr;
  capacity_ = 0;
  setEventLimit();
  return true;
}

bool TraceFile::close() {
  bool ok = flush();
  if (fd_ >= 0) {
    if (map_) {
      unmap();
      truncateTo(fd_, bytes_written_);
    }
    ::close(fd_);
  }
  fd_ = -1;
  setEventLimit();
  used_ = 0;
  path_[0] = '\0';
  return ok;
}

void TraceFile::closeAfterFailure() {
  map_later_ = false;
  if (fd_ >= 0 && map_) {
    // What the open chunk holds is in the file already: it stays, as a whole chunk.
    closeMappedChunk();
    unmap();
    truncateTo(fd_, bytes_written_);
  }
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  used_ = 0;
  payload_ = nullptr;
  capacity_ = 0;
  setEventLimit();
  path_[0] = '\0';
}

void TraceFile::abandon() {
  unmap();  // only this process's view of the parent's file goes
  map_later_ = false;
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  used_ = 0;
  payload_ = nullptr;
  capacity_ = 0;
  setEventLimit();
  path_[0] = '\0';
}

bool TraceFile::appendChunksFrom(int source, uint64_t offset, uint64_t size) {
  if (!flush()) return false;
  if (!withinFileSizeLimit(bytes_written_ + size, &last_errno_)) return false;
  uint64_t target = bytes_written_;
  uint64_t left = size;
  while (left > 0) {
    loff_t from = static_cast<loff_t>(offset + (size - left));
    loff_t to = static_cast<loff_t>(target + (size - left));
    ssize_t copied = copy_file_range(source, &from, fd_, &to, left, 0);
    if (copied < 0 && errno == EINTR) continue;
    if (copied <= 0) {
      // A kernel or a pair of file systems that cannot copy: through memory, a chunk at a time.
      if (copied < 0 && errno != EXDEV && errno != ENOSYS && errno != EOPNOTSUPP &&
          errno != EINVAL) {
        last_errno_ = errno;
        return false;
      }
      static uint8_t* bounce = nullptr;
      if (!bounce) bounce = static_cast<uint8_t*>(mapPages(kBufferBytes));
      if (!bounce) {
        last_errno_ = ENOMEM;
        return false;
      }
      while (left > 0) {
        size_t part = left < kBufferBytes ? static_cast<size_t>(left) : kBufferBytes;
        ssize_t got = pread(source, bounce, part, static_cast<off_t>(offset + (size - left)));
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) {
          last_errno_ = got < 0 ? errno : EIO;
          return false;
        }
        iovec iov{bounce, static_cast<size_t>(got)};
        if (!writeAt(target + (size - left), &iov, 1)) return false;
        left -= static_cast<uint64_t>(got);
      }
      break;
    }
    left -= static_cast<uint64_t>(copied);
  }
  bytes_written_ = target + size;
  if (allocated_ < bytes_written_) allocated_ = bytes_written_;
  if (map_) {
    // The copy went past the window (or through it, with the same page cache): a new one
    // from the new end, or the buffer.
    if (!mapWindow(window_bytes_) && !stopMapping()) return false;
  }
  return true;
}

void TraceFile::setPath(const char* path) {
  strncpy(path_, path, sizeof(path_) - 1);
  path_[sizeof(path_) - 1] = '\0';
}

void TraceFile::swap(TraceFile& other) {
  auto exchange = [](auto& a, auto& b) {
    auto t = a;
    a = b;
    b = t;
  };
  exchange(fd_, other.fd_);
  exchange(seekable_, other.seekable_);
  exchange(regular_, other.regular_);
  exchange(payload_, other.payload_);
  exchange(used_, other.used_);
  exchange(capacity_, other.capacity_);
  exchange(event_limit_, other.event_limit_);
  exchange(buffer_, other.buffer_);
  exchange(map_, other.map_);
  exchange(map_offset_, other.map_offset_);
  exchange(map_bytes_, other.map_bytes_);
  exchange(allocated_, other.allocated_);
  exchange(window_bytes_, other.window_bytes_);
  exchange(map_later_, other.map_later_);
  exchange(bytes_written_, other.bytes_written_);
  exchange(last_errno_, other.last_errno_);
  char path[sizeof(path_)];
  memcpy(path, path_, sizeof(path_));
  memcpy(path_, other.path_, sizeof(path_));
  memcpy(other.path_, path, sizeof(path_));
}

}  // namespace memtrace
