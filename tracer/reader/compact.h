// `memtrace-report compact`: a closed trace rewritten with its chunks compressed (Note
// [Compressed chunks] in tracer/format/records.h).
#pragma once

#include <cstdint>
#include <string>

namespace memtrace::reader {

struct Compacted {
  std::string file;        // the new file's bytes: file header, then chunks
  uint64_t events = 0;     // memory events the trace holds (as read before compacting)
  uint64_t bytes_in = 0;   // the file header and the whole chunks read (a cut tail is not)
  uint64_t chunks_in = 0;  // the chunks read, the open one included
  uint64_t chunks_out = 0;
};

// Reads the trace at `path` whole (so that a damaged file is refused, as every command refuses
// it, before anything is written), then returns it as a version-9 file: its records in the same
// order, byte for byte, in chunks of up to kCompactChunkBytes of records, each compressed with
// zlib at `level` (kept plain where that is not smaller). The open chunk a stopped writer left is
// taken up to its last whole record, a cut last chunk left out: what any reader reads of it.
// Takes files of version 8 or later (earlier versions' records differ from version 9's: their
// time deltas count nanoseconds without saying so, and so on); throws TraceError otherwise.
Compacted compactTrace(const std::string& path, int level = 6);

// Records put together into one compressed chunk: the writer's own chunk size (it closes a chunk
// at 1 MiB, or every 100 ms, whichever comes first: a slow program's chunks are small, and zlib
// does better on a larger one).
inline constexpr uint32_t kCompactChunkBytes = 1u << 20;

}  // namespace memtrace::reader
