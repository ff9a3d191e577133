// The stretches of generated code the Python package told the recorder of
// (memtrace_generated_code; Note [Generated code] in tracer/format/records.h), kept for the
// life of the process: compiled code outlives trace files, so every file gets them all,
// however late it opens (a later memtrace_start with another path, a forked child's file).
// Guarded by the recorder's lock; allocates only arena (mmap) memory.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tracer/recorder/arena.h"
#include "tracer/recorder/python_stack.h"
#include "tracer/recorder/record_writer.h"

namespace memtrace {

class GeneratedCodeTable {
 public:
  // The deepest source stack kept (an FX node's stack trace is a few frames: the user's
  // forward and the functions and modules it calls); deeper ones keep their innermost frames.
  static constexpr size_t kMaxDepth = 64;

  GeneratedCodeTable() = default;
  GeneratedCodeTable(const GeneratedCodeTable&) = delete;
  GeneratedCodeTable& operator=(const GeneratedCodeTable&) = delete;

  // Copies a stretch in: lines [first_line, first_line + line_count) of `file` stand for the
  // stack of `depth` frames (files[i], functions[i], lines[i], outermost first). False when no
  // memory could be had.
  bool add(const char* file, int32_t first_line, int32_t line_count, const char* const* files,
           const char* const* functions, const int32_t* lines, size_t depth);

  // Writes every stretch (writeAll) or the last one added (writeLast) through `writer`.
  bool writeAll(RecordWriter& writer);
  bool writeLast(RecordWriter& writer);

 private:
  struct Stretch {
    Stretch* next;
    const char* file;
    uint32_t file_size;
    int32_t first_line;
    int32_t line_count;
    uint32_t depth;
    python::FrameInfo* frames;  // outermost first; each caches its id in the open file
  };
  bool write(RecordWriter& writer, Stretch& stretch);

  Arena arena_;
  Stretch* head_ = nullptr;
  Stretch* tail_ = nullptr;
};

}  // namespace memtrace
