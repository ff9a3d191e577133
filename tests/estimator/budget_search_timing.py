"""How long estimate() takes on a small GPT-2 (2 layers, n_embd 128, vocab 1000, input 2×128,
device="cuda-sm90"): one estimate, a budget search (1 GiB) and a sweep of six batches, with the
figures each gives (docs/estimator.md quotes them); then plan() of its AdamW step in 1 GiB.

    PYTHONPATH=python MEMTRACE_BIN_DIR=build/bin python3 tests/estimator/budget_search_timing.py [METHOD]

METHOD: estimate()'s method= (default "auto"). Run it with another checkout's python/ on
PYTHONPATH to time that one."""
import sys
import time

import torch
import transformers

import mem_tracer


def main() -> None:
    method = sys.argv[1] if len(sys.argv) > 1 else "auto"
    config = transformers.GPT2Config(n_layer=2, n_embd=128, n_head=4, vocab_size=1000,
                                     n_positions=256, bos_token_id=0, eos_token_id=0)
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(config).eval()
    ids = torch.randint(0, 1000, (2, 128))
    for name, options in (("one estimate", {}), ("budget 1GiB", {"budget": "1GiB"}),
                          ("sweep 1..32", {"batch_sizes": [1, 2, 4, 8, 16, 32]})):
        start = time.perf_counter()
        result = mem_tracer.estimate(model, (ids,), device="cuda-sm90", method=method, **options)
        seconds = time.perf_counter() - start
        figures = (result.largest_batch if "budget" in options else
                   [point.peak_allocated_bytes for point in result.batches] if result.batches
                   else result.peak_allocated_bytes)
        print(f"{name}: {seconds:.1f} s, method {result.method}, {figures}; "
              f"{getattr(result, 'search_note', None)}")
    start = time.perf_counter()
    plan = mem_tracer.plan(model, (ids,), budget="1GiB", device="cuda-sm90",
                           optimizer=torch.optim.AdamW(model.parameters()))
    print(f"plan 1GiB (AdamW step): {time.perf_counter() - start:.1f} s, batch "
          f"{plan.largest_batch}, {plan.peak_bytes}; {getattr(plan, 'search_note', None)}")


if __name__ == "__main__":
    main()
