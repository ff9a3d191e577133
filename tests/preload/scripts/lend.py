"""Note [Stacks lent to threads without Python]: the main thread lends its stack, then waits
(GIL released) while a thread that never ran Python allocates, as autograd's engine runs a
GPU's backward; after the stack is taken back, the same allocation has no Python frame.

    python lend.py LIBCUDART"""
import ctypes
import sys

ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)
runtime = ctypes.CDLL(None)
memtrace = ctypes.PyDLL(None)  # the preloaded libmemtrace.so's C API, called with the GIL
runtime.cudacalls_malloc_on_new_thread.restype = ctypes.c_void_p


def backward():
    assert memtrace.memtrace_lend_python_stack(0) > 0  # LEND:call
    try:
        runtime.cudacalls_malloc_on_new_thread(ctypes.c_size_t(5 << 20))
    finally:
        memtrace.memtrace_end_lent_python_stack()


backward()
runtime.cudacalls_malloc_on_new_thread(ctypes.c_size_t(6 << 20))
