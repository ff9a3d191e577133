"""Stacks of every shape the Python walker must get right: deep recursion (over 100 frames),
generators, coroutines, comprehensions, a finalizer. Prints memtrace_diagnostics() at the end.
Calls the runtime with the GIL released (ctypes.CDLL), as PyTorch's ops do, or held with
`gil` (ctypes.PyDLL), which the public API's walker needs.

    python walk.py LIBCUDART [gil]"""
import asyncio
import ctypes
import sys

ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)
lib = ctypes.PyDLL(None) if sys.argv[2:] == ["gil"] else ctypes.CDLL(None)
memtrace = ctypes.PyDLL(None)
memtrace.memtrace_diagnostics.restype = ctypes.c_char_p
lib.cudacalls_malloc.restype = ctypes.c_void_p
lib.cudacalls_malloc.argtypes = (ctypes.c_size_t,)


def generate():
    for i in range(50):
        yield lib.cudacalls_malloc(4096 + i)


async def coroutine():
    await asyncio.sleep(0)
    return [lib.cudacalls_malloc(8192) for _ in range(30)]


def deep(depth):
    if depth == 0:
        return list(generate()) + [lib.cudacalls_malloc(100) for _ in range(100)]
    return deep(depth - 1)


class Finalized:
    def __del__(self):
        lib.cudacalls_malloc(77)


kept = deep(120) + asyncio.run(coroutine())
Finalized()
print(memtrace.memtrace_diagnostics().decode())
