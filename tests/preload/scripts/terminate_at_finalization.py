"""A Python program whose native library's thread calls std::terminate while the interpreter
finalizes (tests/preload/test_dying.py): the main thread allocates, returns, and the process
aborts during its exit, as PyTorch jobs do when a library's thread outlives the interpreter."""
import ctypes
import sys

library = ctypes.CDLL(sys.argv[1])  # libterminator.so; ctypes.CDLL releases the GIL, as torch does
if library.terminator_start() != 0:
    sys.exit("no Py_IsFinalizing in this interpreter")
for _ in range(200):
    library.terminator_churn(50)
print("main done", flush=True)
