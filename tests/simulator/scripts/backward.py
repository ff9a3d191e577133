"""Backward inside backward, and two backwards at once, on the simulated GPU with PyTorch's CUDA
build: autograd runs a CUDA backward on the device's own thread, which never ran Python
(Note [Stacks lent to threads without Python], tracer/recorder/lent_stacks.cpp).

    python backward.py CASE HOW [TRACE]

CASE: checkpoint (four blocks checkpointed re-entrantly, one training step), grad_in_backward (a
custom Function whose backward calls torch.autograd.grad), threads (two threads training their
own model at once), exception (a backward that fails inside a re-entrant checkpoint, then one
that does not), python_backward (a custom Function whose backward, Python on the device's
thread, allocates in a loop from one line and from a helper a frame deeper, in turn). HOW: preload (run under a bare LD_PRELOAD: nothing of memtrace imported),
switch (mem_tracer.switch_allocator() and start_tracing(TRACE): the package's own lends).
The lines marked with a LINE comment are what the allocations must be named by."""
import sys
import threading
import time

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

CASE, HOW = sys.argv[1], sys.argv[2]
if HOW == "switch":
    import mem_tracer

    mem_tracer.switch_allocator()
    mem_tracer.start_tracing(sys.argv[3])


class Block(nn.Module):
    def __init__(self, width, fails_when_recomputed=False):
        super().__init__()
        self.up = nn.Linear(width, 4 * width)
        self.down = nn.Linear(4 * width, width)
        self.fails_when_recomputed = fails_when_recomputed

    def forward(self, x):
        if self.fails_when_recomputed and torch.is_grad_enabled():
            raise RuntimeError("the recomputation failed")
        hidden = torch.relu(self.up(x))  # LINE:up
        return x + self.down(hidden)  # LINE:down


class Checkpointed(nn.Module):
    def __init__(self, width, blocks, fails=False):
        super().__init__()
        self.blocks = nn.ModuleList(Block(width, fails and i == 2) for i in range(blocks))

    def forward(self, x):
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=True)  # LINE:checkpoint
        return x


class GradInside(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * 2  # LINE:function_forward

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        with torch.enable_grad():
            x = x.detach().requires_grad_()
            inner = (torch.sin(x) * x).sum()  # LINE:inner_forward
            (gradient,) = torch.autograd.grad(inner, x)  # LINE:inner_grad
        return grad * gradient  # LINE:combine


def doubled(tensor):
    return tensor * 2  # LINE:pb_helper


class PythonBackward(torch.autograd.Function):
    # Its backward runs on the device's thread with Python frames of its own, which borrows the
    # lend of loss.backward()'s thread after them. The loop's allocations from one line leave the
    # thread's walk stopping at its innermost frame met again, the reused outer frames read in
    # place (Note [The reused tail read in place]); the helper's, a frame deeper in turn, move
    # the reused frames (copied): the borrow appends the lend after either.
    @staticmethod
    def forward(ctx, x):
        return x * 1

    @staticmethod
    def backward(ctx, grad):
        total = grad
        for step in range(12):
            if step % 3 == 2:
                total = doubled(total)  # LINE:pb_call
            else:
                total = total + grad  # LINE:pb_add
        return total


def python_backward():
    x = torch.randn(64, 256, device="cuda", requires_grad=True)  # LINE:pb_input
    for _ in range(3):
        loss = PythonBackward.apply(x).sum()  # LINE:pb_forward
        loss.backward()  # LINE:pb_backward


def checkpointed_step():
    model = Checkpointed(256, 4).cuda()  # LINE:ck_model
    x = torch.randn(64, 256, device="cuda", requires_grad=True)  # LINE:ck_input
    loss = model(x).sum()  # LINE:ck_forward
    loss.backward()  # LINE:ck_backward


def grad_in_backward():
    block = Block(256).cuda()  # LINE:gb_model
    x = torch.randn(64, 256, device="cuda", requires_grad=True)  # LINE:gb_input
    loss = GradInside.apply(block(x)).sum()  # LINE:gb_forward
    loss.backward()  # LINE:gb_backward


def train(width, steps, start, backward_line):
    block = Block(width).cuda()  # LINE:th_model
    x = torch.randn(4, width, device="cuda")  # LINE:th_input
    start.wait()
    for _ in range(steps):
        loss = block(x).sum()  # LINE:th_forward
        backward_line(loss)


def backward_a(loss):
    loss.backward()  # LINE:backward_a


def backward_b(loss):
    loss.backward()  # LINE:backward_b


def two_threads():
    # Widths 7 * 128 and 11 * 128: every tensor of one model has a byte size the other's cannot.
    start = threading.Barrier(2)
    threads = [threading.Thread(target=train, args=(7 * 128, 30, start, backward_a)),
               threading.Thread(target=train, args=(11 * 128, 30, start, backward_b))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def exception():
    model = Checkpointed(256, 4, fails=True).cuda()  # LINE:ex_model
    x = torch.randn(64, 256, device="cuda", requires_grad=True)  # LINE:ex_input
    try:
        model(x).sum().backward()  # LINE:ex_failing
    except RuntimeError as error:
        assert "recomputation failed" in str(error)
    model.blocks[2].fails_when_recomputed = False
    loss = model(x).sum()  # LINE:ex_forward
    loss.backward()  # LINE:ex_backward


{"checkpoint": checkpointed_step, "grad_in_backward": grad_in_backward, "threads": two_threads,
 "exception": exception, "python_backward": python_backward}[CASE]()
torch.cuda.synchronize()
# PyTorch's own exit race: the device's thread may drop the last reference to a graph task just
# after the thread that waited for it returned; if the interpreter is finalizing by then, that
# thread dies taking the GIL inside a destructor and the process aborts ("terminate called
# without an active exception"), traced or not (2 of 8 runs of the threads case without
# memtrace's changes). A moment for it to finish first.
time.sleep(0.5)
if HOW == "switch":
    mem_tracer.stop_tracing()
print("done")
