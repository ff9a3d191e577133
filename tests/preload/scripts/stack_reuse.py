"""Stacks that share their outer frames with the thread's last one, or seem to (Note [Python
stacks flat in depth], tracer/recorder/python_stack.cpp): each allocation's stack must be its
own, whatever the stack before it was. The cases: a callee's frame pushed again at the same
address and instruction under a caller now on another line; recursion to varying depths; a
generator and a coroutine resumed from other callers; a frame freed and its memory taken by a
frame of another function; two threads at once; chains compared through more than one block of
the comparison's unrolled loop (DEEP frames); stacks deeper than MEMTRACE_PYTHON_DEPTH. The
runtime is called with the GIL released (ctypes.CDLL), as PyTorch's ops are.

    python stack_reuse.py LIBCUDART ROUNDS

Prints one line per allocation, in order, per thread: "<thread> <size> <json of its stack>",
the stack as (file, line, function), outermost first, as the program saw it (sys._getframe)
just before the call, with the innermost frame's line the call's."""
import ctypes
import json
import sys
import threading

ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)
runtime = ctypes.CDLL(None)
runtime.cudacalls_malloc.restype = ctypes.c_void_p
runtime.cudacalls_malloc.argtypes = (ctypes.c_size_t,)
runtime.cudaFree.argtypes = (ctypes.c_void_p,)
ROUNDS = int(sys.argv[2])
expected = []
lock = threading.Lock()


def allocate(size):
    frames, frame = [], sys._getframe()
    while frame is not None:
        frames.append((frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name))
        frame = frame.f_back
    frames.reverse()
    frames[-1] = (frames[-1][0], CALL_LINE, "allocate")
    with lock:
        expected.append((threading.get_native_id(), size, frames))
    runtime.cudaFree(runtime.cudacalls_malloc(size))  # the call


CALL_LINE = allocate.__code__.co_firstlineno + 9


def callee(size):
    allocate(size)


def same_depth_other_caller(size):
    # The callee's frame is pushed at the same address each time, at the same instruction; only
    # the line of this frame differs between the two calls.
    callee(size)
    callee(size + 1)


def recurse(depth, size):
    if depth == 0:
        return allocate(size)
    return recurse(depth - 1, size)


# deep_other_caller's recursion, DEEP frames: its second allocation's walk compares the chain
# from the first frame it meets again out to deep_other_caller, where the two chains part, and
# that must be more than one block of the comparison's loop (128 frames: Note [The chain compared
# a frame at a time]) for the test to show the loop goes on past a block. It is only if the
# frames are where they were at the first allocation. From 3.11 on CPython puts frames in data
# stack chunks of 16 KiB, taken with mmap when a call does not fit and unmapped when the
# recursion returns out of one, and the first call's chunk is not always mapped back at the same
# address (another mapping took its place in between): the frames in it moved, the walk meets
# none of them again, and compares only those of the chunk that holds deep_other_caller, fewer
# than 129 in the processes that missed it (a build that printed its comparisons, 2026-11-30).
# So a comparison cut to one block was caught in some processes only, on every interpreter:
# with 150 frames (this script before) and two threads, one round, in both threads in 2-3 of 8
# processes on 3.11, 3.12 and 3.13, in neither in 1 of 8 on 3.13 (the last session's run of 3
# rounds on 3.13 passed it); with 240 frames, one thread, in 5 of 8 (3.11) and 4 of 8 (3.13). Hence
# with_a_chunk_of_its_own: a frame too large for a 16 KiB chunk (HUGE local variables), for
# which CPython maps a chunk of 128 KiB; the recursion under it fits in what is left of that
# chunk, which lives as long as that frame: both allocations' frames are at the same addresses.
# (3.10 keeps each frame in an object of its own: nothing there to move, and its comparison's
# block is 16 frames.) DEEP + 9 frames at most on the worker thread: within MEMTRACE_PYTHON_DEPTH
# (256), so the walk reaches the outermost frame and keeps the chain.
DEEP = 240
HUGE = 8000


def deep_other_caller(size):
    # The same DEEP frames of recursion below this frame, pushed at the same addresses and
    # instructions; only this frame's line differs: a comparison that runs through more than one
    # block of the unrolled loop (Note [The chain compared a frame at a time]) before it parts.
    recurse(DEEP, size)
    recurse(DEEP, size + 1)


# Written out by exec: HUGE names are not a thing to type (the code is the script's own).
namespace = {"deep_other_caller": deep_other_caller}
exec(f"def with_a_chunk_of_its_own(size):\n"  # noqa: S102
     f"    {' = '.join(f'v{i}' for i in range(HUGE))} = None\n"
     f"    deep_other_caller(size)\n", namespace)
with_a_chunk_of_its_own = namespace["with_a_chunk_of_its_own"]


def generator(size):
    while True:
        allocate(size)
        size = yield


def resume_here(gen, size):
    gen.send(size)


def resume_there(gen, size):
    gen.send(size)


async def coroutine_body(size):
    while True:
        allocate(size)
        size = await Suspend()


class Suspend:
    def __await__(self):
        return (yield)


def drive_here(coroutine, size):
    coroutine.send(size)


def drive_there(coroutine, size):
    coroutine.send(size)


def first_function(size):
    allocate(size)


def second_function(size):
    allocate(size)


def freed_and_reused(size):
    # first_function's frame is freed when it returns; second_function's takes its memory.
    first_function(size)
    second_function(size + 1)


def one_round(base):
    for i in range(3):
        same_depth_other_caller(base + 2 * i)
    for depth in (5, 3, 5, 9, 3, 0, 150, 150, 140, 300):
        recurse(depth, base + 10 + depth)
    with_a_chunk_of_its_own(base + 500)
    gen = generator(base + 200)
    next(gen)
    for i in range(3):
        resume_here(gen, base + 201 + i)
        resume_there(gen, base + 204 + i)
    gen.close()
    coroutine = coroutine_body(base + 300)
    coroutine.send(None)
    for i in range(3):
        drive_here(coroutine, base + 301 + i)
        drive_there(coroutine, base + 304 + i)
    coroutine.close()
    for i in range(3):
        freed_and_reused(base + 400 + 2 * i)


def rounds(base):
    for _ in range(ROUNDS):
        one_round(base)


worker = threading.Thread(target=rounds, args=(1 << 16,))
worker.start()
rounds(1 << 12)
worker.join()
for thread, size, frames in expected:
    print(thread, size, json.dumps(frames))
