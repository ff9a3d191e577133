"""A fork while a stack is lent (Note [Stacks lent to threads without Python]): the main thread
lends its stack and waits, a worker thread forks, and in the child a thread that never ran
Python allocates: the lender is not in the child, so nothing names that allocation there. In
the parent the lend still names the same allocation.

    python fork_during_lend.py LIBCUDART

Prints "child <pid>"."""
import ctypes
import os
import sys
import threading

ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)
runtime = ctypes.CDLL(None)
memtrace = ctypes.PyDLL(None)  # the preloaded libmemtrace.so's C API, called with the GIL
runtime.cudacalls_malloc_on_new_thread.restype = ctypes.c_void_p


def fork_and_allocate():
    pid = os.fork()
    if pid == 0:
        runtime.cudacalls_malloc_on_new_thread(ctypes.c_size_t(2 << 20))
        os._exit(0)
    os.waitpid(pid, 0)
    print("child", pid)


assert memtrace.memtrace_lend_python_stack(0) > 0  # LEND:parent
try:
    worker = threading.Thread(target=fork_and_allocate)
    worker.start()
    worker.join()
    runtime.cudacalls_malloc_on_new_thread(ctypes.c_size_t(1 << 20))
finally:
    memtrace.memtrace_end_lent_python_stack()
