"""The public C API's walker after a sub-interpreter was made: on 3.10 and 3.11 PyGILState_Check()
answers 1 from then on, on every thread, and the current thread state is the GIL holder's, not
the caller's. Threads that never ran Python allocate (each made for it by libcudacalls.so,
called with the GIL released) while another thread runs Python: no allocation may be named by
that thread's line (its frames, read without the GIL). Run with MEMTRACE_PYTHON_WALKER=api.

    python subinterpreter.py LIBCUDART EVENTS"""
import ctypes
import sys
import threading

try:
    import _xxsubinterpreters as interpreters
except ImportError:  # 3.13
    import _interpreters as interpreters

ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)
runtime = ctypes.CDLL(None)
runtime.cudacalls_malloc_on_new_thread.restype = ctypes.c_void_p
interpreters.destroy(interpreters.create())
finished = threading.Event()


def spin():
    while not finished.is_set():
        sum(range(200))  # SPIN:python


spinner = threading.Thread(target=spin)
spinner.start()
for _ in range(int(sys.argv[2])):
    runtime.cudacalls_malloc_on_new_thread(ctypes.c_size_t(4096))
finished.set()
spinner.join()
