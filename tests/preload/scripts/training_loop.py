"""A training loop's allocations through the simulated GPU's runtime, with what mem_tracer's training
hooks tell the recorder (modules, categories, phases, step ends) said through its C API, for
the flight recorder's tests (tests/preload/test_flight.py):

    python training_loop.py LIBCUDART STEPS CHURN [PEAK_STEP] [oom]

Parameters are made once; every step runs a forward (activations in model.block0..3, a
temporary), a backward (gradients), the optimizer (its state made in step 1), then CHURN
allocation and free pairs of small buffers (the events a long run is made of). Step PEAK_STEP
allocates one large buffer more: the run's peak, long before its end. With `oom`,
after the last step an allocation larger than the device is refused and the loop goes on for
half as many steps again (so that a flight recorder drops the failure's events)."""
import ctypes
import sys

ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)
runtime = ctypes.CDLL(None)  # the global scope: memtrace's hooks and its C API (preloaded)
STEPS, CHURN = int(sys.argv[2]), int(sys.argv[3])
PEAK_STEP = int(sys.argv[4]) if len(sys.argv) > 4 else 3
OOM = sys.argv[5:] == ["oom"]
MIB = 1 << 20
PARAMETER, GRADIENT, OPTIMIZER_STATE, ACTIVATION, TEMPORARY = 1, 2, 3, 4, 6
FORWARD, BACKWARD, OPTIMIZER, NO_PHASE = 1, 2, 3, 0
runtime.memtrace_module_enter.argtypes = [ctypes.c_char_p]
runtime.memtrace_set_category.argtypes = [ctypes.c_uint64, ctypes.c_int]
runtime.memtrace_step_end.argtypes = [ctypes.c_uint64]


# Each allocation is `made(runtime.cudaMalloc(out(), size))` on the line it stands for, so that
# the line is the innermost frame: out() makes the pointer, made() hands it back.
_last = None


def out():
    global _last
    _last = ctypes.c_void_p()
    return ctypes.byref(_last)


def made(status):
    return _last if status == 0 else None


def size(n):
    return ctypes.c_size_t(n)


def free(pointer):
    assert runtime.cudaFree(pointer) == 0


def told(pointer, category):
    runtime.memtrace_set_category(pointer.value, category)


def block(index, activations):
    runtime.memtrace_module_enter(f"model.block{index}".encode())
    activation = made(runtime.cudaMalloc(out(), size(2 * MIB + index * 256 * 1024)))  # ALLOC:activation
    told(activation, ACTIVATION)
    activations.append(activation)
    temporary = made(runtime.cudaMalloc(out(), size(512 * 1024)))  # ALLOC:temporary
    free(temporary)
    runtime.memtrace_module_exit()


def step(number, parameters, state):
    runtime.memtrace_training_phase(FORWARD)
    activations = []
    for index in range(4):
        block(index, activations)
    extra = made(runtime.cudaMalloc(out(), size(24 * MIB))) if number == PEAK_STEP else None  # ALLOC:peak
    runtime.memtrace_training_phase(BACKWARD)
    gradients = []
    for _ in parameters:
        gradients.append(made(runtime.cudaMalloc(out(), size(MIB))))  # ALLOC:gradient
    for activation in activations:
        free(activation)
    if extra:
        free(extra)
    runtime.memtrace_training_phase(OPTIMIZER)
    for gradient in gradients:
        told(gradient, GRADIENT)
    while len(state) < len(parameters):
        state.append(made(runtime.cudaMalloc(out(), size(2 * MIB))))  # ALLOC:state
    for buffer in state:
        told(buffer, OPTIMIZER_STATE)
    runtime.memtrace_step_end(number)
    runtime.memtrace_training_phase(NO_PHASE)
    for gradient in gradients:
        free(gradient)
    held = [None] * 8
    for pair in range(CHURN):
        slot = pair % 8
        if held[slot]:
            free(held[slot])
        held[slot] = made(runtime.cudaMalloc(out(), size(4096 + (pair % 5) * 512)))  # ALLOC:churn
    for pointer in held:
        if pointer:
            free(pointer)


def main():
    parameters = []
    for _ in range(3):
        parameters.append(made(runtime.cudaMalloc(out(), size(MIB))))  # ALLOC:parameter
    for parameter in parameters:
        told(parameter, PARAMETER)
    state = []
    steps = STEPS + (STEPS // 2 if OOM else 0)
    for number in range(1, steps + 1):
        if OOM and number == STEPS + 1:
            refused = made(runtime.cudaMalloc(out(), size(1 << 50)))  # ALLOC:oom
            assert refused is None
        step(number, parameters, state)
    print("done", flush=True)


main()
