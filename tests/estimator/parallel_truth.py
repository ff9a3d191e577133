"""Ground truth for one rank of a DDP or FSDP2 job on the CPU: a real job of `world_size`
processes on the gloo backend, each rank's live storages counted across its third training step
by training_truth.measure_step (the first makes the optimizer's state, the second is where DDP
rebuilds its buckets; the third is the steady state).

Each rank is a process forked from a parent that has imported torch (and the models' modules)
but run no op: forking after an op has started OpenMP's threads can hang the child. Each rank
builds the model with the same seed, wraps it as a script does (DistributedDataParallel(model,
bucket_cap_mb=..., gradient_as_bucket_view=...), or fully_shard(block, mesh=...) on each block,
deepest first, then on the root) inside the watch, and trains it with a fresh optimizer of the
given kind, in the loop of training_truth (`out = model(x); loss = f(out, y)` in its body).

    python3 tests/estimator/parallel_truth.py JOBS.json   # prints the truths as JSON

JOBS.json: a list of {"model": ..., "strategy": "ddp"|"fsdp", "world_size": N, "settings": {...},
"optimizer": "adamw"|"sgd", "batch": B}; the answer: per job, a list of per-rank
{"rank", "peak", "phase", "categories"} (or {"error": ...}).
"""

import json
import os
import socket
import sys
import traceback
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as multiprocessing

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import models  # noqa: E402
import zoo  # noqa: E402
from training_truth import measure_step  # noqa: E402

OPTIMIZERS = {
    "sgd": lambda parameters: torch.optim.SGD(parameters, lr=0.01, momentum=0.9),
    "adamw": lambda parameters: torch.optim.AdamW(parameters, lr=1e-3),
}
STEPS = 3  # the third step: the first makes the optimizer's state, DDP rebuilds at the second
TIMEOUT_S = 600


def _mlp():
    """Three linear layers; the last one's 10 rows shard unevenly over 4 ranks (3, 3, 3, 1)."""
    return torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256),
                               torch.nn.ReLU(), torch.nn.Linear(256, 10))


def model_and_example(name, batch):
    """(model in train mode, args, kwargs): the MLP, a model of models.py or of the zoo."""
    if name == "mlp":
        torch.manual_seed(0)
        model = _mlp().train()
        torch.manual_seed(1)
        return model, (torch.randn(batch, 64),), {}
    if name in models.MODELS:
        torch.manual_seed(0)
        return models.MODELS[name][0]().train(), (models.make_input(name, batch),), {}
    entry = zoo.ZOO[name]
    args, kwargs = entry.example(batch)
    return entry.build().train(), args, kwargs


def _wrap(job):
    settings = job["settings"]
    if job["strategy"] == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        return lambda model: DistributedDataParallel(
            model, bucket_cap_mb=settings.get("bucket_cap_mb"),
            gradient_as_bucket_view=settings.get("gradient_as_bucket_view", False))
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("cpu", (job["world_size"],))
    reshard = settings.get("reshard_after_forward", True)

    def wrap(model):
        for path in settings["modules"]:  # deepest first, as given
            fully_shard(model.get_submodule(path), mesh=mesh, reshard_after_forward=reshard)
        return fully_shard(model, mesh=mesh, reshard_after_forward=reshard)

    return wrap


def _rank(rank, job, port, answers):
    try:
        torch.set_num_threads(1)
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=job["world_size"])
        model, args, kwargs = model_and_example(job["model"], job["batch"])
        optimizer = OPTIMIZERS[job["optimizer"]](model.parameters())
        truth = measure_step(model, args, kwargs, optimizer=optimizer, wrap=_wrap(job),
                             steps=STEPS)
        answers.put({"rank": rank, "peak": truth.peak, "phase": truth.phase,
                     "categories": truth.categories, "backend_peak": truth.backend_peak})
        dist.destroy_process_group()
    except Exception as error:  # noqa: BLE001 - the rank's error is the job's answer
        answers.put({"rank": rank, "error": f"{type(error).__name__}: "
                                            f"{str(error).strip().splitlines()[0][:300]}",
                     "trace": traceback.format_exc()[-2000:]})


def _free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def measure_job(job):
    """Every rank's truth for one job, in rank order (a rank that failed: {"error"})."""
    context = multiprocessing.get_context("fork")
    answers = context.Queue()
    port = _free_port()
    ranks = [context.Process(target=_rank, args=(rank, job, port, answers))
             for rank in range(job["world_size"])]
    for process in ranks:
        process.start()
    found = {}
    try:
        for _ in ranks:
            answer = answers.get(timeout=TIMEOUT_S)
            found[answer["rank"]] = answer
    finally:
        for process in ranks:
            process.join(timeout=30)
            if process.is_alive():
                process.kill()
    return [found.get(rank, {"rank": rank, "error": "no answer"})
            for rank in range(job["world_size"])]


def main():
    jobs = json.loads(Path(sys.argv[1]).read_text())
    if any(job["model"] in zoo.ZOO for job in jobs):
        # Imported once here rather than in every rank (an import runs no op).
        import transformers  # noqa: F401
    print(json.dumps([measure_job(job) for job in jobs]))


if __name__ == "__main__":
    if os.environ.get("TRANSFORMERS_VERBOSITY") is None:
        os.environ["TRANSFORMERS_VERBOSITY"] = "error"
    main()
