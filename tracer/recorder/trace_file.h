// The writing end of a trace file: framed, checksummed chunks (records.h), written either
// straight into a shared mapping of the file's tail or through a buffer. It never allocates
// after open() and never throws; every failure is reported by a false return and
// remembered, and then the recorder stops writing.
//
// Note [Records reach the page cache as they are written]
// A record that waits in a buffer is lost when the process dies before the buffer is written
// (abort, std::terminate, a fatal signal, _exit, SIGKILL), and the recorder is told of none of
// these. So a trace that is a regular file is written into a MAP_SHARED mapping of its tail:
// a byte stored there is in the page cache at once, and the page cache outlives the process,
// whatever ends it (memray's FileSink writes its capture file the same way). The chunk being
// filled is the *open chunk*: its 12-byte header stays zero while records are added after it,
// and the reader takes a chunk whose size field is 0 as the file's last, read up to its first
// zero type byte (no record type is 0). Two orders make every moment of that readable:
//   - a record's type byte is stored last (commit()), after its fields and a compiler fence:
//     a process stopped inside a record leaves a zero where the record would start, never a
//     type byte with half its fields;
//   - closing a chunk (flush()) stores its two checksums first and its size last, in one
//     4-byte store: until then the chunk is open (size 0), after it whole. A stop in between
//     leaves an open chunk whose records are all there.
// The flusher still closes the open chunk every kFlushPeriodNs, so that at most that much of
// a trace lies outside a checksummed chunk. The window is extended with fallocate before it
// is mapped, so that a full disk fails there (ENOSPC, said like any failed write) and never
// as a SIGBUS on a store; a window that cannot be extended (a full disk, RLIMIT_FSIZE, a file
// system without fallocate) ends the mapping: the chunks so far stay, and the file goes on
// through the buffer. A pipe, a character device, or a file that cannot be mapped is written
// through the buffer from the start (Note [When records reach the file], recorder_state.h,
// says when that buffer is written). One hazard stays: a program other than memtrace that
// truncates the file while it is mapped makes the next store raise SIGBUS; memtrace's own
// tools never truncate a trace another process holds (Note [Which process owns a trace file]).
//
// Note [Only whole chunks reach the file]
// Through the buffer, every byte goes through one write path (writeAt): a chunk is written
// with pwritev at the end of the last whole chunk, retrying EINTR and short writes. When the
// file cannot take it (ENOSPC, EFBIG, EIO, a write that stops short), the file is truncated
// back to the end of the last whole chunk, so a failed write never leaves a partial chunk
// that a reader would have to treat as the end (and, before the first chunk, as no trace at
// all). A write or an extension that would cross RLIMIT_FSIZE is not attempted: the kernel
// would send SIGXFSZ, whose default action kills the program; it fails as EFBIG instead. The
// limit is read before every write, so a program that lowers it while running is seen too.
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>

namespace memtrace {

class TraceFile {
 public:
  // A chunk is closed when it holds this much: together with the 100 ms flusher thread this
  // bounds what lies outside a checksummed chunk (and, through the buffer, what a killed
  // process can lose).
  static constexpr size_t kFlushBytes = 1 << 20;
  // Room after kFlushBytes for the largest record (a string of kMaxStringBytes, or a
  // loaded object with all its segments).
  static constexpr size_t kBufferBytes = kFlushBytes + (128 << 10);
  // The mapped window of the file's tail: room for an open chunk at its largest, so that the
  // mapping moves about once a chunk (an mmap and an fallocate a MiB: nothing per record). A
  // process that is killed leaves its file up to this much longer than its records (zeros
  // the reader stops at).
  static constexpr size_t kWindowBytes = 2 << 20;
  // The window once the process is exiting (trimForExit): the file is left this much longer
  // than its records, not a whole window.
  static constexpr size_t kExitWindowBytes = 64 << 10;

  TraceFile() = default;
  TraceFile(const TraceFile&) = delete;
  TraceFile& operator=(const TraceFile&) = delete;

  enum class OpenResult { kOpened, kBusy, kFailed };
  // Creates (truncates) `path` and writes the file header (`flags`: records.h's FileFlags).
  // kBusy: another live process has the file open for tracing (it holds the file's lock);
  // nothing was changed. On failure *error says why. `allow_mapping` false writes through
  // the buffer even where the file could be mapped.
  OpenResult open(const char* path, const char** error, uint32_t flags = 0,
                  bool allow_mapping = true);
  bool isOpen() const { return fd_ >= 0; }
  // Whether records go straight into the mapped file (Note [Records reach the page cache as
  // they are written]): then every committed record survives any end of the process.
  bool mapped() const { return map_ != nullptr || map_later_; }
  const char* path() const { return path_; }
  void setPath(const char* path);
  // A regular file (not a pipe or a device): what has a folder to write reports beside it.
  bool regular() const { return regular_; }
  int fd() const { return fd_; }

  // Space for a record of at most `bytes` (<= kBufferBytes - kFlushBytes); nullptr when
  // the file is not open or a flush failed. Write the record's fields from reserve() + 1 on,
  // then commit() it with its type byte.
  uint8_t* reserve(size_t bytes) {
    if (fd_ < 0 || used_ + bytes > capacity_ || used_ >= kFlushBytes) return reserveSlow(bytes);
    return payload_ + used_;
  }
  // reserve(kEventBytes), for a memory event (RecordWriter::writeEvent): one comparison, with a
  // limit kept as the file changes (Note [An event's room in one comparison]).
  static constexpr size_t kEventBytes = 64;
  uint8_t* reserveEvent() {
    if (used_ >= event_limit_) return reserveSlow(kEventBytes);
    return payload_ + used_;
  }
  // The record [start, end) is complete but for its type byte, start[0]: stores it last
  // (Note [Records reach the page cache as they are written]).
  void commit(uint8_t* start, uint8_t* end, uint8_t type) {
    __atomic_signal_fence(__ATOMIC_RELEASE);
    *start = type;
    used_ = static_cast<size_t>(end - payload_);
  }

  // Closes the open chunk (its header written, through the buffer the chunk written).
  // Returns false when that failed (the file then ends at its last whole chunk, Note [Only
  // whole chunks reach the file]).
  bool flush();
  bool hasPendingBytes() const { return used_ > 0; }
  // The end of the last whole chunk.
  uint64_t bytesWritten() const { return bytes_written_; }

  // At exit: closes the open chunk and cuts the file there, so that a process that ends
  // leaves its file as long as its records; a record made after (teardown) maps a window of
  // kExitWindowBytes again.
  bool trimForExit();
  // Flushes and closes; the file ends on its last whole chunk.
  bool close();
  // After a failed write: what the file holds stays (a mapped file keeps its open chunk's
  // records, closed), nothing more is written, the descriptor is closed.
  void closeAfterFailure();
  // In a child after fork(): forgets the parent's file, mapping and buffer without touching
  // them, so the parent's file stays exactly as the parent writes it.
  void abandon();
  // Copies `size` bytes of `source` (whole chunks another trace file holds) from `offset` to
  // this file's end, as whole chunks of this file. Closes the open chunk first.
  bool appendChunksFrom(int source, uint64_t offset, uint64_t size);
  // Exchanges everything with `other` (the flight recorder's compaction: Note [The flight
  // recorder's file], flight.cpp).
  void swap(TraceFile& other);

  // Why the last write failed (errno), or 0.
  int lastErrno() const { return last_errno_; }

 private:
  uint8_t* reserveSlow(size_t bytes);
  // Writes [iov, iov + count) at `offset`, all of it or (truncating back to `offset`)
  // nothing of it. False, with last_errno_ set, when it could not.
  bool writeAt(uint64_t offset, iovec* iov, int count);
  // Maps a window from the open chunk on with room for a whole open chunk, extending the
  // file to cover it; `window` bytes at least. False (nothing changed) when it cannot.
  bool mapWindow(size_t window);
  // Leaves the mapping: the file is cut at the end of its last whole chunk and goes on
  // through the buffer. False when no buffer can be had.
  bool stopMapping();
  void unmap();
  void pointAtBuffer();
  // Writes the open chunk's header (Note [Records reach the page cache as they are written]);
  // the next open chunk starts after it.
  void closeMappedChunk();

  int fd_ = -1;
  bool seekable_ = true;
  bool regular_ = false;
  // Where the open chunk's payload is (the buffer, or the mapping past the chunk's header),
  // how much of it is used and how much it may hold.
  uint8_t* payload_ = nullptr;
  size_t used_ = 0;
  size_t capacity_ = 0;
  // Note [An event's room in one comparison]
  // reserve() takes its fast path when the file is open, the record fits what is left and the
  // open chunk has not reached kFlushBytes: three tests, 9 instructions an event on the record
  // path (bench/record_instructions). For a record of kEventBytes the three are one: used_ below
  // this limit, 0 while the file is closed, else the least of kFlushBytes and capacity_ less
  // kEventBytes plus 1 (0 where capacity_ is below kEventBytes), so reserveEvent() answers as
  // reserve(kEventBytes) does. It is set again (setEventLimit) wherever fd_ or capacity_ change.
  size_t event_limit_ = 0;
  void setEventLimit() {
    size_t room = capacity_ >= kEventBytes ? capacity_ - (kEventBytes - 1) : 0;
    event_limit_ = fd_ < 0 ? 0 : room < kFlushBytes ? room : kFlushBytes;
  }
  uint8_t* buffer_ = nullptr;
  // The mapping: file bytes [map_offset_, map_offset_ + map_bytes_), all within the file's
  // allocated size (allocated_).
  uint8_t* map_ = nullptr;
  uint64_t map_offset_ = 0;
  size_t map_bytes_ = 0;
  uint64_t allocated_ = 0;
  size_t window_bytes_ = kWindowBytes;
  bool map_later_ = false;      // mapped, but no window until a record needs one (trimForExit)
  uint64_t bytes_written_ = 0;  // the end of the last whole chunk: the open chunk's header
  int last_errno_ = 0;
  char path_[4096] = {};
};

}  // namespace memtrace
