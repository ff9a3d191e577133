"""A Python program that allocates "device" memory through the simulated GPU's runtime, for the
file:line attribution tests. Lines tagged `# ALLOC:<name>` are where the tests expect
allocations to be attributed; sizes are in `SIZES`.

The runtime is loaded into the global scope and called through it, as PyTorch's libraries
call it (a call through the library's own handle would bypass LD_PRELOAD's interposition).
ctypes.CDLL releases the GIL around the call, as PyTorch's bindings do around every op: the
tracer reads this thread's frames without it. `python layers.py LIBCUDART gil` calls through
ctypes.PyDLL instead, which keeps the GIL held (the case of a free in a tensor's dealloc)."""
import ctypes
import sys

ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)
runtime = ctypes.PyDLL(None) if sys.argv[2:] == ["gil"] else ctypes.CDLL(None)
SIZES = {"weights": 8 << 20, "activation": 3 << 20, "temporary": 1 << 20, "output": 2 << 20}


def cuda_alloc(size):
    pointer = ctypes.c_void_p()
    assert runtime.cudaMalloc(ctypes.byref(pointer), ctypes.c_size_t(size)) == 0
    return pointer


def cuda_free(pointer):
    assert runtime.cudaFree(pointer) == 0


class Layer:
    def __init__(self):
        self.weights = cuda_alloc(SIZES["weights"])  # ALLOC:weights

    def forward(self):
        activation = cuda_alloc(SIZES["activation"])  # ALLOC:activation
        temporary = cuda_alloc(SIZES["temporary"])  # ALLOC:temporary
        cuda_free(temporary)
        return activation


def main():
    layers = [Layer() for _ in range(2)]
    activations = [layer.forward() for layer in layers]
    output = cuda_alloc(SIZES["output"])  # ALLOC:output
    # The peak is here: 2 weights + 2 activations + output = 16 + 6 + 2 MiB.
    for activation in activations:
        cuda_free(activation)
    cuda_free(output)
    return layers


if __name__ == "__main__":
    main()
