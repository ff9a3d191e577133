#include "tracer/reader/reader.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>

#include "tracer/format/codec.h"

namespace memtrace::reader {

const Device* Tables::device(int index) const {
  for (const Device& device : devices)
    if (device.device == index) return &device;
  return nullptr;
}

TraceReader::TraceReader(std::string path) : path_(std::move(path)) {
  file_ = std::fopen(path_.c_str(), "rb");
  if (!file_) throw TraceError(path_ + ": cannot open: " + strerror(errno));
  struct stat info;
  if (fstat(fileno(file_), &info) != 0 || !S_ISREG(info.st_mode)) {
    std::fclose(file_);
    file_ = nullptr;
    throw TraceError(path_ + ": not a regular file");
  }
  file_size_ = static_cast<uint64_t>(info.st_size);
  try {
    rewind();
  } catch (...) {
    std::fclose(file_);
    file_ = nullptr;
    throw;
  }
}

TraceReader::~TraceReader() {
  if (file_) std::fclose(file_);
}

void TraceReader::fail(const std::string& what) const {
  throw TraceError(path_ + ": " + what + " at byte " + std::to_string(recordOffset()));
}

uint64_t TraceReader::recordOffset() const {
  if (!record_start_ || chunk_.empty()) return next_chunk_offset_;
  return chunk_offset_ + static_cast<uint64_t>(record_start_ - chunk_.data());
}

void TraceReader::rewind() {
  if (file_size_ == 0) throw TraceError(path_ + ": the file is empty");
  std::rewind(file_);
  uint8_t header[format::kFileHeaderSize];
  size_t got = std::fread(header, 1, sizeof(header), file_);
  size_t magic_bytes = got < sizeof(format::kMagic) ? got : sizeof(format::kMagic);
  if (memcmp(header, format::kMagic, magic_bytes) != 0)
    throw TraceError(path_ + ": not a memtrace trace (it does not start with MEMTRACE)");
  if (got < sizeof(header))
    throw TraceError(path_ + ": the file header is cut short (" + std::to_string(got) +
                     " of 16 bytes)");
  uint32_t version = codec::getU32(header + 8);
  if (version < format::kOldestVersion || version > format::kVersion)
    throw TraceError(path_ + ": trace format version " + std::to_string(version) +
                     ", but this memtrace reads versions " +
                     std::to_string(format::kOldestVersion) + " to " +
                     std::to_string(format::kVersion));
  if (codec::getU32(header + 12) != 0)
    throw TraceError(path_ + ": unknown flags in the file header (corrupted?)");

  tables_ = Tables{};
  context_ = Context{};
  tracing_ = false;
  last_time_ = 0;
  last_address_ = 0;
  last_python_stack_[0] = last_python_stack_[1] = 0;
  last_native_stack_[0] = last_native_stack_[1] = 0;
  event_count_ = 0;
  seen_process_info_ = false;
  module_by_thread_.clear();
  current_module_ = 0;
  cut_offset_ = 0;
  next_chunk_offset_ = format::kFileHeaderSize;
  chunk_.clear();
  cursor_ = end_ = nullptr;
  record_start_ = nullptr;
}

bool TraceReader::nextChunk() {
  uint64_t offset = next_chunk_offset_;
  record_start_ = nullptr;
  if (offset == file_size_) {
    if (!seen_process_info_) throw TraceError(path_ + ": the trace holds no records");
    return false;
  }
  uint8_t header[format::kChunkHeaderSize];
  size_t got = std::fread(header, 1, sizeof(header), file_);
  auto cut = [&]() {
    // A partial chunk at the end: the writer was stopped in the middle of a write.
    cut_offset_ = offset;
    if (!seen_process_info_)
      throw TraceError(path_ + ": the file ends before its first whole chunk (byte " +
                       std::to_string(offset) + " of " + std::to_string(file_size_) + ")");
    return false;
  };
  if (got < sizeof(header)) return cut();
  if (codec::crc32c(header, 8) != codec::getU32(header + 8))
    throw TraceError(path_ + ": corrupted chunk header (checksum mismatch) at byte " +
                     std::to_string(offset));
  uint32_t size = codec::getU32(header);
  if (size == 0 || size > format::kMaxChunkPayload)
    throw TraceError(path_ + ": a chunk of " + std::to_string(size) + " bytes at byte " +
                     std::to_string(offset) + " (corrupted?)");
  if (offset + sizeof(header) + size > file_size_) return cut();
  chunk_.resize(size);
  if (std::fread(chunk_.data(), 1, size, file_) != size) return cut();
  if (codec::crc32c(chunk_.data(), size) != codec::getU32(header + 4))
    throw TraceError(path_ + ": corrupted chunk (checksum mismatch) at byte " +
                     std::to_string(offset));
  chunk_offset_ = offset + sizeof(header);
  next_chunk_offset_ = chunk_offset_ + size;
  cursor_ = chunk_.data();
  end_ = cursor_ + size;
  return true;
}

uint64_t TraceReader::varint() {
  uint64_t value;
  if (!codec::getVarint(&cursor_, end_, &value)) fail("a record cut off by the end of its chunk");
  return value;
}

int64_t TraceReader::zigzag() {
  return codec::unzigzag(varint());
}

uint8_t TraceReader::byte() {
  if (cursor_ == end_) fail("a record cut off by the end of its chunk");
  return *cursor_++;
}

std::string TraceReader::bytes() {
  uint64_t size = varint();
  if (size > static_cast<uint64_t>(end_ - cursor_)) fail("a string longer than its chunk");
  std::string result(reinterpret_cast<const char*>(cursor_), size);
  cursor_ += size;
  return result;
}

void TraceReader::checkId(uint32_t id, size_t count, const char* table) const {
  if (id >= count)
    fail(std::string("a reference to ") + table + " " + std::to_string(id) +
         ", which is not defined before it");
}

int TraceReader::deviceIndex(int64_t index, const char* record) const {
  if (index < -1 || index >= format::kMaxDevices)
    fail(std::string(record) + " on device " + std::to_string(index) +
         ", past the devices a trace can name (-1 to " + std::to_string(format::kMaxDevices - 1) +
         ")");
  return static_cast<int>(index);
}

}  // namespace memtrace::reader
