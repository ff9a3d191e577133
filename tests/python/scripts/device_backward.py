"""Autograd's backward as it runs on a GPU, for Note [Stacks lent to threads without Python]:
an autograd Function whose backward allocates on a thread that never ran Python (the test
runtime's cudacalls_malloc_on_new_thread), as a GPU's backward runs on the device's own autograd
thread while the thread that called backward waits with the GIL released. On the CPU autograd
runs backward on the calling thread: only the device thread is stood in for.

    python device_backward.py LIBCUDART TRACE"""
import ctypes
import sys

ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)
import torch  # noqa: E402

import mem_tracer  # noqa: E402

runtime = ctypes.CDLL(None)
runtime.cudacalls_malloc_on_new_thread.restype = ctypes.c_void_p


class OnTheDeviceThread(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        runtime.cudacalls_malloc_on_new_thread(ctypes.c_size_t(5 << 20))
        return grad * 2


x = torch.ones(3, requires_grad=True)
engine = torch.autograd.variable.Variable._execution_engine
mem_tracer.start_tracing(sys.argv[2])
wrapped = torch.autograd.variable.Variable._execution_engine is not engine
loss = OnTheDeviceThread.apply(x).sum()
loss.backward()  # ALLOC:backward
(gradient,) = torch.autograd.grad(OnTheDeviceThread.apply(x).sum(), x)  # ALLOC:grad
mem_tracer.stop_tracing()
runtime.cudacalls_malloc_on_new_thread(ctypes.c_size_t(6 << 20))  # not tracing: untraced
print(wrapped, torch.autograd.variable.Variable._execution_engine is engine, x.grad.tolist(),
      gradient.tolist())
