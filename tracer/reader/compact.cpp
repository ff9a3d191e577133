#include "tracer/reader/compact.h"

#include <errno.h>
#include <unistd.h>
#include <zlib.h>

#include <cstring>
#include <vector>

#include "tracer/format/codec.h"
#include "tracer/format/records.h"
#include "tracer/reader/reader.h"

namespace memtrace::reader {

namespace {

struct Counter : RecordVisitor {
  uint64_t events = 0;
  void onEvent(const Event&) { ++events; }
};

// Appends one chunk holding `records` to `out`: compressed, or plain where zlib does not
// make it smaller (Note [Compressed chunks]).
void appendChunk(std::string& out, const std::vector<uint8_t>& records, int level) {
  uLongf bound = compressBound(records.size());
  std::vector<uint8_t> stored(4 + bound);
  codec::putU32(stored.data(), static_cast<uint32_t>(records.size()));
  uLongf made = bound;
  uint32_t size_field;
  if (compress2(stored.data() + 4, &made, records.data(), records.size(), level) == Z_OK &&
      4 + made < records.size()) {
    stored.resize(4 + made);
    size_field = static_cast<uint32_t>(stored.size()) | format::kCompressedChunk;
  } else {
    stored.assign(records.begin(), records.end());
    size_field = static_cast<uint32_t>(stored.size());
  }
  uint8_t header[format::kChunkHeaderSize];
  codec::putU32(header, size_field);
  codec::putU32(header + 4, codec::crc32c(stored.data(), stored.size()));
  codec::putU32(header + 8, codec::crc32c(header, 8));
  out.append(reinterpret_cast<const char*>(header), sizeof(header));
  out.append(reinterpret_cast<const char*>(stored.data()), stored.size());
}

}  // namespace

Compacted compactTrace(const std::string& path, int level) {
  TraceReader trace(path);
  Counter counter;
  trace.read(counter);
  if (trace.version() < format::kTimeUnitVersion)
    throw TraceError(path + ": trace format version " + std::to_string(trace.version()) +
                     "; compact takes versions " + std::to_string(format::kTimeUnitVersion) +
                     " to " + std::to_string(format::kVersion) + " (an older file's records " +
                     "differ from version " + std::to_string(format::kTimeUnitVersion) + "'s)");
  Compacted result;
  result.events = counter.events;
  uint8_t file_header[format::kFileHeaderSize];
  std::memcpy(file_header, format::kMagic, sizeof(format::kMagic));
  // The records are copied as they are: a version 8-10 file's events keep version 10's layout
  // (Note [Events in fewer bytes]), so it becomes version 10 (the first that reads all of its
  // records and compressed chunks), a version 11 or 12 file keeps its version.
  codec::putU32(file_header + 8, trace.version() < format::kCompactEventsVersion
                                     ? format::kShortRecordsVersion
                                     : trace.version());
  codec::putU32(file_header + 12, trace.flags());
  result.file.assign(reinterpret_cast<const char*>(file_header), sizeof(file_header));

  // The read above checked every chunk; this pass takes their bytes again, in the same order.
  FILE* file = std::fopen(path.c_str(), "rb");
  if (!file) throw TraceError(path + ": " + std::strerror(errno));
  auto readAt = [&](uint8_t* out, size_t size, uint64_t at) {
    if (fseeko(file, static_cast<off_t>(at), SEEK_SET) != 0 ||
        std::fread(out, 1, size, file) != size) {
      std::fclose(file);
      throw TraceError(path + ": changed while it was read (byte " + std::to_string(at) + ")");
    }
  };
  uint64_t end = trace.cutOffset() ? trace.cutOffset() : trace.fileSize();
  std::vector<uint8_t> records, stored;
  uint64_t offset = format::kFileHeaderSize;
  while (offset < end) {
    uint8_t header[format::kChunkHeaderSize];
    readAt(header, sizeof(header), offset);
    uint32_t size = codec::getU32(header);
    uint64_t payload = offset + sizeof(header);
    ++result.chunks_in;
    if (size == 0) {  // the open chunk: up to its last whole record, and nothing after it
      stored.resize(trace.openChunkEnd() - payload);
      readAt(stored.data(), stored.size(), payload);
      offset = end;
    } else {
      bool compressed = size & format::kCompressedChunk;
      size &= ~format::kCompressedChunk;
      stored.resize(size);
      readAt(stored.data(), size, payload);
      offset = payload + size;
      if (compressed) {  // the read above inflated it: another result is a file changed since
        std::vector<uint8_t> inflated;
        if (!inflateRecords(stored.data(), stored.size(), inflated).empty()) {
          std::fclose(file);
          throw TraceError(path + ": changed while it was read (byte " +
                           std::to_string(payload - format::kChunkHeaderSize) + ")");
        }
        stored.swap(inflated);
      }
    }
    if (!records.empty() && records.size() + stored.size() > kCompactChunkBytes) {
      appendChunk(result.file, records, level);
      ++result.chunks_out;
      records.clear();
    }
    records.insert(records.end(), stored.begin(), stored.end());
  }
  std::fclose(file);
  if (!records.empty()) {
    appendChunk(result.file, records, level);
    ++result.chunks_out;
  }
  result.bytes_in = end;
  return result;
}

}  // namespace memtrace::reader
