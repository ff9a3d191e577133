"""sdpa with one key and value head for many query heads, without enable_gqa (multi-query
attention as timm's MultiQueryAttention2d calls it, in gemma3n's vision tower): every fused
kernel takes it (Note [sdpa's kernel choice] in estimator/sdpa_choice.h), so on cuda-sm90 a
float32 call runs memory-efficient attention, makes no cuBLAS workspace, and the estimate
predicts the simulated H100's max_memory_allocated to the byte (issue 53: counted as math, the
estimate held cuBLAS's 32 MiB workspace the card never made, +2.56 % on gemma3n_vision).

Assumed of the real card: what the simulated H100 runs is PyTorch's own kernel choice
(sdp_utils.cpp in torch 2.14.1+cu130), so the kernel is the real card's; the efficient kernel's
own buffers (its output, the logsumexp) are as PyTorch allocates them.
"""
import os
import sys
from pathlib import Path

import torch
from conftest import REPOSITORY, on_the_card
from torch import nn
from torch.nn import functional

sys.path.insert(0, str(REPOSITORY / "python"))
import mem_tracer

BUILD = os.environ.get("MEMTRACE_BUILD_DIR")
if BUILD:  # the build ctest names, not whatever the checkout's build/ holds
    os.environ.setdefault("MEMTRACE_BIN_DIR", str(Path(BUILD) / "bin"))
    os.environ.setdefault("MEMTRACE_SIMULATOR_DIR", str(Path(BUILD) / "simulator"))

# gemma3n_vision's attention at a small size: 4 query heads, one key and value head.
BATCH, QUERY_HEADS, LENGTH, HEAD_DIM = 2, 4, 64, 64
CUBLAS_WORKSPACE = 32 * 1024 * 1024  # what the math path's bmm would take on sm90

PROGRAM = """
import json, sys, torch
sys.path.insert(0, {tests!r})
from test_sdpa_one_key_head import OneKeyHead, inputs
model, (q, k, v) = OneKeyHead(), inputs()
q, k, v = q.cuda(), k.cuda(), v.cuda()
torch.cuda.synchronize()
held = torch.cuda.memory_allocated()
torch.cuda.reset_peak_memory_stats()
with torch.no_grad():
    model(q, k, v)
torch.cuda.synchronize()
print(json.dumps({{"held": held, "peak": torch.cuda.max_memory_allocated()}}))
"""


class OneKeyHead(nn.Module):
    """sdpa alone, so that nothing else in the forward makes the cuBLAS workspace."""

    def forward(self, q, k, v):
        return functional.scaled_dot_product_attention(q, k, v)


def inputs():
    torch.manual_seed(0)
    return (torch.randn(BATCH, QUERY_HEADS, LENGTH, HEAD_DIM),
            torch.randn(BATCH, 1, LENGTH, HEAD_DIM), torch.randn(BATCH, 1, LENGTH, HEAD_DIM))


def test_one_key_head_runs_efficient_attention_as_on_the_card():
    assert torch.backends.cuda.is_built(), "the card's side needs a CUDA build of torch"
    card = on_the_card(PROGRAM.format(tests=str(Path(__file__).parent)))
    # The card made no cuBLAS workspace: a fused kernel ran, not the math path's bmm.
    assert card["peak"] - card["held"] < CUBLAS_WORKSPACE
    estimate = mem_tracer.estimate(OneKeyHead(), inputs(), device="cuda-sm90")
    [kernel] = estimate.raw["kernels"]
    assert kernel["kernel"] == "efficient", kernel
    assert estimate.raw["summary"]["baseline_allocated_bytes"] == card["held"]
    assert estimate.peak_allocated_bytes == card["peak"]
