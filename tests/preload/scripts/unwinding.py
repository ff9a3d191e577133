"""Allocations made while an exception unwinds (a finally block, a context manager's __exit__,
the handler), and from a Python callback that C code calls back into (qsort's comparator, the
GIL taken again inside a call that released it). Calls the runtime with the GIL released.

    python unwinding.py LIBCUDART"""
import ctypes
import ctypes.util
import sys

ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)
runtime = ctypes.CDLL(None)
libc = ctypes.CDLL(ctypes.util.find_library("c"))


def allocate(size):
    pointer = ctypes.c_void_p()
    assert runtime.cudaMalloc(ctypes.byref(pointer), ctypes.c_size_t(size)) == 0
    return pointer


class Scope:
    def __enter__(self):
        return self

    def __exit__(self, *exception):
        allocate(3 << 20)  # ALLOC:exit
        return False


def op():
    try:
        with Scope():
            raise ValueError("unwinding")
    finally:
        allocate(1 << 20)  # ALLOC:finally


def caller():
    try:
        op()
    except ValueError:
        allocate(2 << 20)  # ALLOC:handler


@ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int))
def compare(a, b):
    allocate(4 << 20)  # ALLOC:callback
    return a[0] - b[0]


caller()
values = (ctypes.c_int * 2)(2, 1)
libc.qsort(values, 2, ctypes.sizeof(ctypes.c_int), compare)  # one comparison: one allocation
