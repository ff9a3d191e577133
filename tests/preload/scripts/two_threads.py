"""Two threads allocate at once, each through the simulated GPU's runtime with the GIL released (as
PyTorch's ops do), while Python runs on the other: the main thread allocates Python objects and
forces collections between its own allocations. Every event must name its own thread's line.

    python two_threads.py LIBCUDART EVENTS_PER_THREAD

Prints the native thread ids: "worker <id>" and "main <id>"."""
import ctypes
import gc
import sys
import threading

ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)
runtime = ctypes.CDLL(None)
EVENTS = int(sys.argv[2])


def allocate_and_free(size):
    pointer = ctypes.c_void_p()
    runtime.cudaMalloc(ctypes.byref(pointer), ctypes.c_size_t(size))  # ALLOC:both
    runtime.cudaFree(pointer)


worker_id = []


def worker():
    worker_id.append(threading.get_native_id())
    for i in range(EVENTS):
        allocate_and_free(4096)  # CALL:worker


def busy_python(i):
    garbage = [{"i": i, "list": [object() for _ in range(20)]} for _ in range(5)]
    garbage.append(garbage)  # a cycle, for the collector
    if i % 500 == 0:
        gc.collect()
    return len(garbage)


thread = threading.Thread(target=worker)
thread.start()
for i in range(EVENTS):
    busy_python(i)
    allocate_and_free(8192)  # CALL:main
thread.join()
print("worker", worker_id[0])
print("main", threading.get_native_id())
