/* Where CPython keeps what the recorder reads without the GIL (Note [Python frames without the
 * GIL], python_stack.cpp): per minor version, x86_64 and aarch64 (LP64), the default build and
 * the free-threaded one (not --with-trace-refs). Read from each version's own headers
 * (Include/cpython/pystate.h, code.h, unicodeobject.h, bytesobject.h and, 3.11 on,
 * Include/internal/pycore_frame.h); tests/unit/python_layout_probe.c compiles against every
 * CPython installed here and fails on any offset that differs, so that a table that lies cannot
 * pass the tests. Plain C, so that the probe can include it. */
#ifndef MEMTRACE_PYTHON_LAYOUTS_H
#define MEMTRACE_PYTHON_LAYOUTS_H

#include <stdint.h>

struct MemtracePythonLayout {
  uint32_t minor; /* 10 for CPython 3.10 */
  /* The thread's innermost frame: tstate->frame (3.10), tstate->cframe->current_frame (3.11,
   * 3.12), tstate->current_frame (3.13). thread_cframe < 0: read the frame from the thread state.
   */
  int32_t thread_cframe;
  int32_t current_frame;
  /* 3.10: a chain of PyFrameObjects, f_back / f_code / f_lasti (an int, in code units).
   * 3.11 on: _PyInterpreterFrame, with its code (f_code, or f_executable in 3.13), the previous
   * frame, the instruction pointer (prev_instr, or instr_ptr in 3.13) and the owner byte. */
  int32_t frame_is_object;
  int32_t frame_code;
  int32_t frame_previous;
  int32_t frame_instruction;
  int32_t frame_owner; /* -1: none (3.10) */
  int32_t owned_by_generator;
  int32_t owned_by_c_stack; /* -1: no such owner (3.10, 3.11) */
  /* PyCodeObject: its bytecode (co_code_adaptive, 3.11 on), the first instruction a frame is
   * complete past (_co_firsttraceable, an int, 3.11 on), and its immutable metadata. */
  int32_t code_units;
  int32_t code_first_traceable;
  int32_t code_filename;
  int32_t code_name;
  int32_t code_first_line; /* an int */
  int32_t code_line_table; /* a bytes object */
  /* str: the size of PyASCIIObject and PyCompactUnicodeObject (a compact string's characters
   * follow the one or the other), the offsets of its length and state bit field. */
  int32_t ascii_object_size;
  int32_t compact_object_size;
  int32_t unicode_length;
  int32_t unicode_state;
  /* bytes: ob_size and ob_sval. */
  int32_t bytes_size;
  int32_t bytes_data;
  /* PyTypeObject's tp_dealloc (Note [Code objects that die]). */
  int32_t type_dealloc;
  /* 1: the free-threaded build (Py_GIL_DISABLED, "3.13t"), whose object header is 16 bytes
   * longer; PyObject's ob_type: 8, or 24 free-threaded. */
  int32_t free_threaded;
  int32_t object_type;
};

/* The bounds CPython's _PyCode_CheckLineNumber walks over a line table (PyCodeAddressRange,
 * the same in 3.10-3.13): a range is started as _PyLineTable_InitAddressRange does. */
struct MemtraceAddressRange {
  int start;
  int end;
  int line;
  struct {
    int computed_line;
    const uint8_t* next;
    const uint8_t* limit;
  } opaque;
};

/* The same order as the fields of MemtracePythonLayout. The free-threaded 3.13t differs from
 * 3.13 in every offset inside an object (its header), not in the thread state or the frames. */
#define MEMTRACE_PYTHON_LAYOUTS                                                                    \
  {10,  -1, 24,  1,  32, 24, 96, -1, -1, -1, -1, -1, 104,                                          \
   112, 40, 120, 48, 72, 16, 32, 16, 32, 48, 0,  8},                                               \
      {11,  56, 8,   0,  32, 48, 56, 69, 1,  -1, 184, 168, 112,                                    \
       120, 72, 136, 48, 72, 16, 32, 16, 32, 48, 0,   8},                                          \
      {12,  56, 0,   0,  0,  8,  56, 70, 1,  3,  192, 176, 112,                                    \
       120, 68, 136, 40, 56, 16, 32, 16, 32, 48, 0,   8},                                          \
      {13,  -1, 72,  0,  0,  8,  56, 70, 1,  3,  200, 184, 112,                                    \
       120, 68, 136, 40, 56, 16, 32, 16, 32, 48, 0,   8},                                          \
  {                                                                                                \
    13, -1, 72, 0, 0, 8, 56, 70, 1, 3, 216, 200, 128, 136, 84, 152, 56, 72, 32, 48, 32, 48, 64, 1, \
        24                                                                                         \
  }

#endif
