"""A script that knows nothing of mem_tracer: `python -m mem_tracer run` traces it. It calls
the CUDA runtime as PyTorch's libraries do (through the global scope)."""
import ctypes
import sys

ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)
cuda = ctypes.CDLL(None)  # the GIL released around the call, as PyTorch does around an op
cuda.cudacalls_malloc.restype = ctypes.c_void_p
cuda.cudacalls_malloc.argtypes = (ctypes.c_size_t,)


def build():
    blocks = []
    for _ in range(2):
        blocks.append(cuda.cudacalls_malloc(48 << 20))  # ALLOC:big
    return blocks


blocks = build()
small = cuda.cudacalls_malloc(1 << 20)  # ALLOC:small
print("script done")
sys.exit(int(sys.argv[2]) if len(sys.argv) > 2 else 0)
