"""A traced Python process forks while tracing; parent and child each allocate with the GIL
released. Prints "child <pid>".

    python forking.py LIBCUDART"""
import ctypes
import os
import sys

ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)
runtime = ctypes.CDLL(None)


def allocate(size):
    pointer = ctypes.c_void_p()
    assert runtime.cudaMalloc(ctypes.byref(pointer), ctypes.c_size_t(size)) == 0


allocate(1 << 20)  # ALLOC:before
pid = os.fork()
if pid == 0:
    allocate(2 << 20)  # ALLOC:child
    os._exit(0)
print("child", pid, flush=True)
os.waitpid(pid, 0)
allocate(3 << 20)  # ALLOC:parent
