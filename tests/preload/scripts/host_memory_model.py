"""A model-like program for the tests: a small transformer's inference,
written as the CUDA allocations it would make, on memtrace's simulated GPU (its
runtime behind CUDA's real entry points). Each allocation is one C call from the line that
makes it, as torch.empty(..., device="cuda") is, so the report reads like a model's.

    python3 host_memory_model.py PATH/TO/libcudart.so.13"""
import ctypes
import sys

# Loaded into the global scope and called through it, as PyTorch's libraries call CUDA.
ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)
cuda = ctypes.CDLL(None)  # CDLL: the GIL released around the call, as PyTorch does around an op
cuda.cudacalls_malloc.restype = ctypes.c_void_p
cuda.cudacalls_malloc.argtypes = (ctypes.c_size_t,)
cuda.cudaFree.argtypes = (ctypes.c_void_p,)
malloc, free = cuda.cudacalls_malloc, cuda.cudaFree

BATCH, TOKENS, WIDTH, HEADS, LAYERS, VOCABULARY = 8, 512, 1024, 16, 4, 32000
FLOAT = 4


class Block:
    def __init__(self):
        self.qkv = malloc(3 * WIDTH * WIDTH * FLOAT)
        self.proj = malloc(WIDTH * WIDTH * FLOAT)
        self.up = malloc(4 * WIDTH * WIDTH * FLOAT)
        self.down = malloc(4 * WIDTH * WIDTH * FLOAT)

    def attention(self, x):
        qkv = malloc(BATCH * TOKENS * 3 * WIDTH * FLOAT)
        scores = malloc(BATCH * HEADS * TOKENS * TOKENS * FLOAT)
        probabilities = malloc(BATCH * HEADS * TOKENS * TOKENS * FLOAT)
        free(scores)
        context = malloc(BATCH * TOKENS * WIDTH * FLOAT)
        free(probabilities)
        free(qkv)
        out = malloc(BATCH * TOKENS * WIDTH * FLOAT)
        free(context)
        return out

    def mlp(self, x):
        hidden = malloc(BATCH * TOKENS * 4 * WIDTH * FLOAT)
        activated = malloc(BATCH * TOKENS * 4 * WIDTH * FLOAT)
        free(hidden)
        out = malloc(BATCH * TOKENS * WIDTH * FLOAT)
        free(activated)
        return out

    def forward(self, x):
        attended = self.attention(x)
        out = self.mlp(attended)
        free(attended)
        return out


class Model:
    def __init__(self):
        self.embedding = malloc(VOCABULARY * WIDTH * FLOAT)
        self.blocks = [Block() for _ in range(LAYERS)]
        self.head = malloc(VOCABULARY * WIDTH * FLOAT)

    def forward(self):
        x = malloc(BATCH * TOKENS * WIDTH * FLOAT)
        for block in self.blocks:
            y = block.forward(x)
            free(x)
            x = y
        logits = malloc(BATCH * TOKENS * VOCABULARY * FLOAT)
        free(x)
        return logits


def main():
    model = Model()
    logits = model.forward()
    free(logits)


main()
