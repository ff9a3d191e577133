/* Checks tracer/recorder/python_layouts.h against the headers of the CPython it is compiled
 * with: every offset the recorder reads without the GIL (Note [Python frames without the
 * GIL]) must be the one CPython's own structs have. tests/preload/test_python_stacks.py
 * compiles it against every CPython installed here:
 *   cc -I<repository> -I<include> -I<include>/internal python_layout_probe.c
 * Prints one line per field that differs and exits 1; prints "layout ok 3.N" and exits 0. */
#define Py_BUILD_CORE 1
#include <Python.h>
#include <stddef.h>
#include <stdio.h>
#if PY_VERSION_HEX >= 0x030B0000
#include "internal/pycore_frame.h"
#else
#include <frameobject.h>
#endif

#include "tracer/recorder/python_layouts.h"

static int failures = 0;

static void check(const char* what, long ours, long theirs) {
  if (ours != theirs) {
    printf("%s: the table says %ld, CPython %s says %ld\n", what, ours, PY_VERSION, theirs);
    ++failures;
  }
}

int main(void) {
  static const struct MemtracePythonLayout layouts[] = {MEMTRACE_PYTHON_LAYOUTS};
  const struct MemtracePythonLayout* layout = NULL;
#ifdef Py_GIL_DISABLED
  const int free_threaded = 1;
#else
  const int free_threaded = 0;
#endif
  for (size_t i = 0; i < sizeof(layouts) / sizeof(layouts[0]); ++i)
    if (layouts[i].minor == PY_MINOR_VERSION && layouts[i].free_threaded == free_threaded)
      layout = &layouts[i];
  if (PY_MAJOR_VERSION != 3 || !layout) {
    printf("no layout for CPython %s\n", PY_VERSION);
    return 1;
  }
  /* The check the recorder makes at run time to tell this build's object layout. */
  check("object_type", layout->object_type, offsetof(PyObject, ob_type));
#if PY_VERSION_HEX >= 0x030D0000
  check("thread_cframe", layout->thread_cframe, -1);
  check("current_frame", layout->current_frame, offsetof(PyThreadState, current_frame));
#elif PY_VERSION_HEX >= 0x030B0000
  check("thread_cframe", layout->thread_cframe, offsetof(PyThreadState, cframe));
  check("current_frame", layout->current_frame, offsetof(_PyCFrame, current_frame));
#else
  check("thread_cframe", layout->thread_cframe, -1);
  check("current_frame", layout->current_frame, offsetof(PyThreadState, frame));
#endif
#if PY_VERSION_HEX >= 0x030B0000
  check("frame_is_object", layout->frame_is_object, 0);
#if PY_VERSION_HEX >= 0x030D0000
  check("frame_code", layout->frame_code, offsetof(_PyInterpreterFrame, f_executable));
  check("frame_instruction", layout->frame_instruction, offsetof(_PyInterpreterFrame, instr_ptr));
#else
  check("frame_code", layout->frame_code, offsetof(_PyInterpreterFrame, f_code));
  check("frame_instruction", layout->frame_instruction, offsetof(_PyInterpreterFrame, prev_instr));
#endif
  check("frame_previous", layout->frame_previous, offsetof(_PyInterpreterFrame, previous));
  check("frame_owner", layout->frame_owner, offsetof(_PyInterpreterFrame, owner));
  check("sizeof(owner)", 1, sizeof(((_PyInterpreterFrame*)0)->owner));
  check("owned_by_generator", layout->owned_by_generator, FRAME_OWNED_BY_GENERATOR);
#if PY_VERSION_HEX >= 0x030C0000
  check("owned_by_c_stack", layout->owned_by_c_stack, FRAME_OWNED_BY_CSTACK);
#else
  check("owned_by_c_stack", layout->owned_by_c_stack, -1);
#endif
  check("code_units", layout->code_units, offsetof(PyCodeObject, co_code_adaptive));
  check("code_first_traceable", layout->code_first_traceable,
        offsetof(PyCodeObject, _co_firsttraceable));
  check("sizeof(_co_firsttraceable)", sizeof(int), sizeof(((PyCodeObject*)0)->_co_firsttraceable));
#else
  check("frame_is_object", layout->frame_is_object, 1);
  check("frame_code", layout->frame_code, offsetof(PyFrameObject, f_code));
  check("frame_previous", layout->frame_previous, offsetof(PyFrameObject, f_back));
  check("frame_instruction", layout->frame_instruction, offsetof(PyFrameObject, f_lasti));
  check("sizeof(f_lasti)", sizeof(int), sizeof(((PyFrameObject*)0)->f_lasti));
  check("frame_owner", layout->frame_owner, -1);
#endif
  check("type_dealloc", layout->type_dealloc, offsetof(PyTypeObject, tp_dealloc));
  check("code_filename", layout->code_filename, offsetof(PyCodeObject, co_filename));
  check("code_name", layout->code_name, offsetof(PyCodeObject, co_name));
  check("code_first_line", layout->code_first_line, offsetof(PyCodeObject, co_firstlineno));
  check("sizeof(co_firstlineno)", sizeof(int), sizeof(((PyCodeObject*)0)->co_firstlineno));
  check("code_line_table", layout->code_line_table, offsetof(PyCodeObject, co_linetable));
  check("ascii_object_size", layout->ascii_object_size, sizeof(PyASCIIObject));
  check("compact_object_size", layout->compact_object_size, sizeof(PyCompactUnicodeObject));
  check("unicode_length", layout->unicode_length, offsetof(PyASCIIObject, length));
  check("unicode_state", layout->unicode_state, offsetof(PyASCIIObject, state));
  check("bytes_size", layout->bytes_size, offsetof(PyVarObject, ob_size));
  check("bytes_data", layout->bytes_data, offsetof(PyBytesObject, ob_sval));
  /* The state bit field as the recorder decodes it (kind, compact, ascii in bits 2-6). */
  {
    PyASCIIObject probe;
    memset(&probe, 0, sizeof(probe));
    probe.state.kind = 4;
    probe.state.compact = 1;
    probe.state.ascii = 1;
    unsigned int bits;
    memcpy(&bits, (char*)&probe + offsetof(PyASCIIObject, state), sizeof(bits));
    check("state.kind bits", 4, (bits >> 2) & 7);
    check("state.compact bit", 1, (bits >> 5) & 1);
    check("state.ascii bit", 1, (bits >> 6) & 1);
  }
  /* The bounds _PyCode_CheckLineNumber walks: python_stack.cpp's AddressRange. */
  check("sizeof(PyCodeAddressRange)", sizeof(struct MemtraceAddressRange),
        sizeof(PyCodeAddressRange));
  check("PyCodeAddressRange.opaque", offsetof(struct MemtraceAddressRange, opaque),
        offsetof(PyCodeAddressRange, opaque));
  check("opaque.lo_next", offsetof(struct MemtraceAddressRange, opaque.next),
        offsetof(PyCodeAddressRange, opaque.lo_next));
  check("opaque.limit", offsetof(struct MemtraceAddressRange, opaque.limit),
        offsetof(PyCodeAddressRange, opaque.limit));
  if (failures) return 1;
  printf("layout ok 3.%d%s\n", PY_MINOR_VERSION, free_threaded ? "t" : "");
  return 0;
}
