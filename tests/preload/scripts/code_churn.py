"""Code objects made and dropped by the thousand, each called once to allocate and then dropped,
as torch.compile, dynamo's recompiles and torch.fx's generated forwards do: the next code object
often takes the dead one's address, and its allocation must still be named after itself (Note
[Code objects that die], tracer/recorder/python_stack.cpp). Four ways: code.replace() with a new
name and file, exec(compile()) of a new function, a closure made by a new factory, and a lambda
from eval(). Each allocation is made by the made function itself (the innermost frame), with
the GIL released (ctypes.CDLL), as PyTorch's ops are.

    python code_churn.py LIBCUDART COUNT

Prints one line per allocation, in order: "<file> <line> <function>", what it must be named."""
import ctypes
import sys
import types

ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)
runtime = ctypes.CDLL(None)
COUNT = int(sys.argv[2])
expected = []


def template(size):
    return runtime.cudaMalloc(ctypes.byref(size[0]), ctypes.c_size_t(size[1]))  # TEMPLATE:call


def call_and_drop(function, size):
    pointer = ctypes.c_void_p()
    function((pointer, size))
    runtime.cudaFree(pointer)


TEMPLATE_LINE = template.__code__.co_firstlineno + 1
for i in range(COUNT):
    # code.replace(): the same line table, a new name and file each time.
    code = template.__code__.replace(co_name=f"replaced_{i}", co_filename=f"<replaced {i}>")
    call_and_drop(types.FunctionType(code, globals()), 256 + i)
    expected.append((f"<replaced {i}>", TEMPLATE_LINE, f"replaced_{i}"))
    del code

    # exec(compile()): a new function, its call on a line that moves.
    blank = "\n" * (i % 7)
    namespace = {"runtime": runtime, "ctypes": ctypes}
    exec(compile(f"{blank}def compiled_{i}(size):\n"
                 f"    return runtime.cudaMalloc(ctypes.byref(size[0]), ctypes.c_size_t(size[1]))\n",
                 f"<compiled {i}>", "exec"), namespace)
    call_and_drop(namespace.pop(f"compiled_{i}"), 256 + i)
    expected.append((f"<compiled {i}>", i % 7 + 2, f"compiled_{i}"))

    # A closure: its code object is a constant of a factory that dies with it.
    exec(compile(f"def factory_{i}(offset):\n"
                 f"    def closure_{i}(size):\n"
                 f"        return runtime.cudaMalloc(ctypes.byref(size[0]), ctypes.c_size_t(size[1] + offset))\n"
                 f"    return closure_{i}\n", f"<closure {i}>", "exec"), namespace)
    call_and_drop(namespace.pop(f"factory_{i}")(0), 256 + i)
    expected.append((f"<closure {i}>", 3, f"closure_{i}"))

    # A lambda from eval().
    lam = eval(compile(f"lambda size: runtime.cudaMalloc(ctypes.byref(size[0]), ctypes.c_size_t(size[1] + {i} * 0))",
                       f"<lambda {i}>", "eval"), namespace)
    call_and_drop(lam, 256 + i)
    expected.append((f"<lambda {i}>", 1, "<lambda>"))
    del lam

for file, line, function in expected:
    print(file, line, function)
