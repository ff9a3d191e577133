#include "tracer/recorder/generated_code.h"

#include <cstring>

#include "tracer/format/records.h"

namespace memtrace {
namespace {

uint32_t cappedSize(const char* text) {
  size_t size = text ? std::strlen(text) : 0;
  return static_cast<uint32_t>(size > format::kMaxStringBytes ? format::kMaxStringBytes : size);
}

}  // namespace

bool GeneratedCodeTable::add(const char* file, int32_t first_line, int32_t line_count,
                             const char* const* files, const char* const* functions,
                             const int32_t* lines, size_t depth) {
  // The innermost frames are the ones a report names: a stack past the bound loses its outer.
  size_t skip = depth > kMaxDepth ? depth - kMaxDepth : 0;
  depth -= skip;
  auto* stretch = static_cast<Stretch*>(arena_.allocate(sizeof(Stretch)));
  auto* frames =
      static_cast<python::FrameInfo*>(arena_.allocate(depth * sizeof(python::FrameInfo)));
  if (!stretch || !frames) return false;
  stretch->file_size = cappedSize(file);
  stretch->file = arena_.copyString(file, stretch->file_size);
  if (!stretch->file) return false;
  for (size_t i = 0; i < depth; ++i) {
    python::FrameInfo& frame = frames[i];
    const char* source_file = files[skip + i] ? files[skip + i] : "";
    const char* function = functions[skip + i] ? functions[skip + i] : "";
    frame.file_size = cappedSize(source_file);
    frame.function_size = cappedSize(function);
    frame.file = arena_.copyString(source_file, frame.file_size);
    frame.function = arena_.copyString(function, frame.function_size);
    if (!frame.file || !frame.function) return false;
    frame.line = lines[skip + i];
    frame.file_frame_id = 0;
    frame.generation = 0;  // no file's: a file's generation is 1 or more
  }
  stretch->first_line = first_line;
  stretch->line_count = line_count;
  stretch->depth = static_cast<uint32_t>(depth);
  stretch->frames = frames;
  stretch->next = nullptr;
  (tail_ ? tail_->next : head_) = stretch;
  tail_ = stretch;
  return true;
}

bool GeneratedCodeTable::write(RecordWriter& writer, Stretch& stretch) {
  return writer.writeGeneratedCode(stretch.file, stretch.file_size, stretch.first_line,
                                   stretch.line_count, stretch.frames, stretch.depth);
}

bool GeneratedCodeTable::writeAll(RecordWriter& writer) {
  for (Stretch* stretch = head_; stretch; stretch = stretch->next)
    if (!write(writer, *stretch)) return false;
  return true;
}

bool GeneratedCodeTable::writeLast(RecordWriter& writer) {
  return !tail_ || write(writer, *tail_);
}

}  // namespace memtrace
