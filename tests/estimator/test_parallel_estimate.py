"""mem_tracer.estimate(training=True, parallel=..., world_size=N): one rank of a DDP or FSDP2 job,
recorded on one process through PyTorch's fake process group, against every rank of the real
job on the CPU (gloo, a process a rank, live storages counted: parallel_truth.py); plan() per
rank; and what cannot be predicted, refused in one line.

What this assumes of the real platform: a rank's storages on a GPU are those of the same step
on the CPU (the caching allocator's replay is proven elsewhere), and NCCL, like the truth here,
keeps its own buffers out of them (gloo's reduce-scatter copies its input, inside the
collective: parallel_truth leaves that out, and says how much it was).
"""

import sys
from pathlib import Path

import pytest
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1] / "python"))
import parallel_accuracy  # noqa: E402
from parallel_truth import OPTIMIZERS, model_and_example  # noqa: E402

import mem_tracer  # noqa: E402
from mem_tracer.estimator import parallel  # noqa: E402

SMALL = parallel_accuracy.SMALL_BUCKET_MB


def test_a_subset_of_the_table():
    """Three rows of docs/accuracy.md's table, every rank: DDP with small buckets and its own
    gradient copies, FSDP with uneven shards over 4 ranks, FSDP keeping GPT-2's parameters
    unsharded after the forward."""
    rows = parallel_accuracy.run([
        ("mlp", "ddp", {"bucket_cap_mb": SMALL, "gradient_as_bucket_view": False}, 2),
        ("mlp", "fsdp", {"reshard_after_forward": True}, 4),
        ("gpt2-sdpa", "fsdp", {"reshard_after_forward": False}, 2),
    ])
    assert len(rows) == 2 + 4 + 2
    for row in rows:
        assert row.status in ("ok", "within the bound"), parallel_accuracy.markdown([row])
    ddp = rows[0]
    # The buckets are a copy of the gradients (the model's 85,002 parameters in float32).
    assert "gradient buckets 340,008 (temporary)" in ddp.communication
    uneven = rows[2:6]
    # The last layer's 10 rows over 4 ranks (3, 3, 3, 1): rank 0 predicted, rank 3 predicted
    # less, ranks 1 and 2 bounded by the two; the real ranks agree.
    assert uneven[0].predicted > uneven[3].predicted
    assert uneven[1].bound == uneven[2].bound == (uneven[3].predicted, uneven[0].predicted)
    assert uneven[0].measured > uneven[3].measured
    assert "unsharded parameters" in rows[6].communication


def test_what_the_communication_buffers_are():
    model, args, _ = model_and_example("mlp", 4)
    optimizer = OPTIMIZERS["adamw"](model.parameters())
    gradients = sum(p.numel() * p.element_size() for p in model.parameters())

    def estimate(job, world_size=2):
        return mem_tracer.estimate(model, args, training=True, optimizer=optimizer,
                                   device="cpu", parallel=job, world_size=world_size)

    copies = estimate(parallel.DDP(gradient_as_bucket_view=False))
    views = estimate(parallel.DDP(gradient_as_bucket_view=True))
    single = mem_tracer.estimate(model, args, training=True, optimizer=optimizer, device="cpu")
    # Buckets beside the gradients, or the gradients themselves: one copy of them apart.
    assert copies.parallel.communication == {"gradient buckets": gradients}
    assert copies.parallel.communication_categories == {"gradient buckets":
                                                        {"temporary": gradients}}
    assert views.parallel.communication_categories == {"gradient buckets":
                                                       {"gradient": gradients}}
    assert (copies.training_categories_peak_bytes - views.training_categories_peak_bytes
            == gradients)
    assert views.training_categories_peak_bytes == single.training_categories_peak_bytes
    text = str(copies)
    assert "per rank of 2 (DDP" in text and "gradient buckets" in text
    assert copies.raw["parallel"]["world_size"] == 2 and "rank 0 of 2 under DDP" in copies.method_note
    sharded = estimate("fsdp", world_size=4)
    assert sharded.parallel.uneven and set(sharded.parallel.ranks) == {0, 3}
    assert sharded.training_breakdown["optimizer_state"] < single.training_breakdown["optimizer_state"] / 3
    assert "ranks differ" in str(sharded)


def test_what_nccl_holds_is_said_on_a_cuda_profile():
    """DDP's first-step bucket, which NCCL keeps until its watchdog lets go (Note [NCCL holds
    DDP's first buckets]): the step replayed with it live throughout, on a CUDA profile only;
    FSDP's reserved figure said to be a lower bound there. Proven against jobs on simulated
    H100s by tests/simulator/test_parallel_jobs.py."""
    model, args, _ = model_and_example("mlp", 4)
    parameters = sum(p.numel() * p.element_size() for p in model.parameters())

    def estimate(job, device):
        step = mem_tracer.TrainingStep(optimizer=OPTIMIZERS["adamw"](model.parameters()),
                                       parallel=job, world_size=2)
        return mem_tracer.estimate(model, args, training=step, device=device)

    ddp = estimate("ddp", "cuda")
    held = ddp.parallel.held_by_nccl
    assert held.buckets == (parameters,) and held.bytes == parameters
    # The bucket's block (512-byte rounding) beside the same step.
    assert held.peak_allocated_bytes == ddp.peak_allocated_bytes + (parameters + 511) // 512 * 512
    assert held.peak_requested_bytes == ddp.peak_requested_bytes + parameters
    assert "NCCL let go of DDP's first-step bucket" in str(ddp)
    assert ddp.raw["parallel"]["held_by_nccl"]["bytes"] == parameters
    assert ddp.parallel.ranks_allocated == {0: ddp.peak_allocated_bytes}
    assert not ddp.parallel.reserved_lower_bound
    assert estimate("ddp", "cpu").parallel.held_by_nccl is None  # gloo holds nothing
    fsdp = estimate("fsdp", "cuda")
    assert fsdp.parallel.held_by_nccl is None and fsdp.parallel.reserved_lower_bound
    assert "reserved is a lower bound" in str(fsdp)
    assert not estimate("fsdp", "cpu").parallel.reserved_lower_bound


def test_plan_per_rank_is_proven_by_running_it():
    """The largest batch a rank fits under a budget, with DDP over 2 ranks: the real job at
    that batch fits, one more does not; FSDP's sharded state fits that one more."""
    model, args, _ = model_and_example("mlp", 4)
    optimizer = OPTIMIZERS["adamw"](model.parameters())
    budget = 2_500_000
    plan = mem_tracer.plan(model, args, budget=budget, optimizer=optimizer, device="cpu",
                           parallel=parallel.DDP(), world_size=2)
    assert plan.largest_batch and plan.peak_bytes <= budget
    jobs = [{"model": "mlp", "strategy": "ddp", "world_size": 2, "settings": {},
             "optimizer": "adamw", "batch": batch}
            for batch in (plan.largest_batch, plan.largest_batch + 1)]
    fits, breaks = parallel_accuracy.measure(jobs)
    assert all(rank["peak"] <= budget for rank in fits)
    assert all(rank["peak"] > budget for rank in breaks)
    larger, args, _ = model_and_example("mlp", plan.largest_batch + 1)
    sharded = mem_tracer.estimate(larger, args, training=True, device="cpu", parallel="fsdp",
                                  optimizer=OPTIMIZERS["adamw"](larger.parameters()), world_size=2)
    assert sharded.training_categories_peak_bytes <= budget


def _refusal(**options):
    model, args, _ = model_and_example("mlp", 2)
    model = options.pop("model", model)
    settings = dict(training=True, optimizer=OPTIMIZERS["sgd"](model.parameters()), device="cpu")
    settings.update(options)
    with pytest.raises(mem_tracer.MemTracerError) as caught:
        mem_tracer.estimate(model, args, **settings)
    message = str(caught.value)
    assert "\n" not in message
    return message


class WithSpare(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = model_and_example("mlp", 2)[0]
        self.spare = torch.nn.Linear(3, 3)

    def forward(self, x):
        return self.body(x)


def test_what_cannot_be_predicted_is_refused_in_one_line(monkeypatch):
    assert "world_size=N" in _refusal(parallel="ddp")
    assert "world_size=N" in _refusal(parallel="fsdp", world_size=0)
    assert "parallel must be" in _refusal(parallel="zero3", world_size=2)
    assert "training=True" in _refusal(parallel="ddp", world_size=2, training=False)
    assert "no module 'blocks'" in _refusal(parallel=parallel.FSDP(modules=("blocks",)),
                                           world_size=2)
    # A model DistributedDataParallel refuses: nothing to train.
    frozen, _, _ = model_and_example("mlp", 2)
    for parameter in frozen.parameters():
        parameter.requires_grad_(False)
    assert "DistributedDataParallel" in _refusal(model=frozen, parallel="ddp", world_size=2,
                                                 optimizer=None)
    # A parameter no step uses, which DDP (without find_unused_parameters) refuses at the
    # step after: the real job would stop there too.
    assert "finished reduction" in _refusal(model=WithSpare(), parallel="ddp", world_size=2)
    # A torch without the fake backend.
    import torch.distributed as dist
    monkeypatch.delattr(dist.Backend, "FAKE")
    assert "fake process group" in _refusal(parallel="ddp", world_size=2)


def test_a_process_group_already_there_is_refused_and_left_alone():
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)
    try:
        assert "already has one" in _refusal(parallel="ddp", world_size=2)
        assert dist.is_initialized() and dist.get_world_size() == 2
    finally:
        dist.destroy_process_group()


def test_the_process_is_left_as_it_was():
    """No process group, no excepthook of torch.distributed's, the user's model untouched."""
    import torch.distributed as dist
    model, args, _ = model_and_example("mlp", 2)
    before = {name: parameter.clone() for name, parameter in model.named_parameters()}
    hook = sys.excepthook
    mem_tracer.estimate(model, args, training=True, optimizer=OPTIMIZERS["sgd"](model.parameters()),
                        device="cpu", parallel="fsdp", world_size=2)
    assert not dist.is_initialized() and sys.excepthook is hook
    assert type(model) is torch.nn.Sequential
    assert all(torch.equal(before[name], parameter)
               for name, parameter in model.named_parameters())
