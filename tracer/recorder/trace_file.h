// The writing end of a trace file: a buffer that becomes framed, checksummed chunks
// (records.h). It never allocates after open() and never throws; every failure is
// reported by a false return and remembered, and then the recorder stops writing.
//
// Note [Only whole chunks reach the file]
// Every byte goes through one write path (writeAt): a chunk is written with pwritev at the
// end of the last whole chunk, retrying EINTR and short writes. When the file cannot take
// it (ENOSPC, EFBIG, EIO, a write that stops short), the file is truncated back to the end
// of the last whole chunk, so a failed write never leaves a partial chunk that a reader
// would have to treat as the end (and, before the first chunk, as no trace at all). A write
// that would cross RLIMIT_FSIZE is not attempted: the kernel would send SIGXFSZ, whose
// default action kills the program; it fails as EFBIG instead. The limit is read before
// every write, so a program that lowers it while running is seen too.
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>

namespace memtrace {

class TraceFile {
 public:
  // A chunk is written when the buffer holds this much: together with the 100 ms flusher
  // thread this bounds what a killed process can lose (the issue: every 100 ms or 1 MiB).
  static constexpr size_t kFlushBytes = 1 << 20;
  // Room after kFlushBytes for the largest record (a string of kMaxStringBytes, or a
  // loaded object with all its segments).
  static constexpr size_t kBufferBytes = kFlushBytes + (128 << 10);

  TraceFile() = default;
  TraceFile(const TraceFile&) = delete;
  TraceFile& operator=(const TraceFile&) = delete;

  enum class OpenResult { kOpened, kBusy, kFailed };
  // Creates (truncates) `path` and writes the file header. kBusy: another live process
  // has the file open for tracing (it holds the file's lock); nothing was changed. On
  // failure *error says why.
  OpenResult open(const char* path, const char** error);
  bool isOpen() const { return fd_ >= 0; }
  const char* path() const { return path_; }

  // Space for a record of at most `bytes` (<= kBufferBytes - kFlushBytes); nullptr when
  // the file is not open or a flush failed. Follow with commit(end of the record).
  uint8_t* reserve(size_t bytes);
  void commit(uint8_t* end) { used_ = static_cast<size_t>(end - buffer_); }

  // Writes the buffer as one chunk. Returns false when the write failed (the file then
  // ends at its last whole chunk, Note [Only whole chunks reach the file]).
  bool flush();
  bool hasPendingBytes() const { return used_ > 0; }
  uint64_t bytesWritten() const { return bytes_written_; }

  // Flushes and closes.
  bool close();
  // In a child after fork(): forgets the parent's file and buffer without writing, so the
  // parent's file stays exactly as the parent writes it.
  void abandon();

  // Why the last write failed (errno text), or nullptr.
  int lastErrno() const { return last_errno_; }

 private:
  // Writes [iov, iov + count) at `offset`, all of it or (truncating back to `offset`)
  // nothing of it. False, with last_errno_ set, when it could not.
  bool writeAt(uint64_t offset, iovec* iov, int count);

  int fd_ = -1;
  bool seekable_ = true;
  uint8_t* buffer_ = nullptr;
  size_t used_ = 0;
  uint64_t bytes_written_ = 0;  // the end of the last whole chunk
  int last_errno_ = 0;
  char path_[4096] = {};
};

}  // namespace memtrace
