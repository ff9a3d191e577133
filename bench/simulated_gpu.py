"""The simulated GPU's own cost (docs/performance.md, "The simulated GPU"): CPU time of GPT-2
small's forward and training step on a simulated H100 against the same on the CPU build of
torch, and a Llama-style 7B bf16 training step with AdamW on a simulated H100 80GB (wall time,
host memory, the device's peak).

    python3 bench/simulated_gpu.py [BUILD_DIR]

The CPU build is the torch of `python3` (the one memtrace-estimate links); the CUDA build is
BUILD_DIR/venv-torch-cuda's. Each workload runs in a process of its own; CPU time is the
process's (time.process_time) over the measured iterations after two warm-up ones, the median
of five rounds."""
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUILD = Path(sys.argv[1] if len(sys.argv) > 1 and not sys.argv[1].startswith("--")
             else ROOT / "build").resolve()
CUDA_PYTHON = BUILD / "venv-torch-cuda" / "bin" / "python"

WORKLOAD = r'''
import json, resource, statistics, sys, time
import torch, transformers
mode, device = sys.argv[1], sys.argv[2]
torch.manual_seed(0)
if mode in ("forward1", "forward8", "train4"):
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config()).to(device)
    batch = {"forward1": 1, "forward8": 8, "train4": 4}[mode]
    ids = torch.randint(0, 50257, (batch, 128), device=device)
    if mode == "train4":
        model.train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        def step():
            loss = model(ids, labels=ids, use_cache=False).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
    else:
        model.eval()
        def step():
            with torch.no_grad():
                model(ids, use_cache=False)
    for _ in range(2):
        step()
    rounds = []
    for _ in range(5):
        start = time.process_time()
        step()
        if device == "cuda":
            torch.cuda.synchronize()
        rounds.append(time.process_time() - start)
    print(json.dumps({"cpu_seconds": statistics.median(rounds)}))
else:  # llama7b
    start = time.time()
    config = transformers.LlamaConfig(hidden_size=4096, intermediate_size=11008,
                                      num_hidden_layers=32, num_attention_heads=32,
                                      num_key_value_heads=32, vocab_size=32000)
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(config).to(torch.bfloat16)
    model = model.to_empty(device="cuda")  # weights made on the device: no host copy
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(0, 32000, (1, 2048), device="cuda")
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    print(json.dumps({"wall_seconds": time.time() - start,
                      "max_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                      "peak_allocated": torch.cuda.max_memory_allocated(),
                      "parameters": sum(p.numel() for p in model.parameters())}))
'''


def run(python, mode, device, simulated):
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT / "python")
    command = [str(python), "-c", WORKLOAD, mode, device]
    if simulated:
        command = [sys.executable, "-m", "mem_tracer.simulated_gpu", "h100", "--", *command]
    output = subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout
    return json.loads(output.strip().splitlines()[-1])


def main():
    rows = []
    for mode, what in (("forward1", "GPT-2 small forward, batch 1 x 128"),
                       ("forward8", "GPT-2 small forward, batch 8 x 128"),
                       ("train4", "GPT-2 small training step (AdamW), batch 4 x 128")):
        cpu = run("python3", mode, "cpu", False)["cpu_seconds"]
        simulated = run(CUDA_PYTHON, mode, "cuda", True)["cpu_seconds"]
        rows.append(f"| {what} | {1000 * cpu:,.1f} ms | {1000 * simulated:,.1f} ms | "
                    f"{simulated / cpu:.2f} |")
    print("| workload | CPU build of torch (CPU time) | simulated H100 (CPU time) | ratio |")
    print("|---|---:|---:|---:|")
    print("\n".join(rows))
    llama = run(CUDA_PYTHON, "llama7b", "cuda", True)
    print(f"\nLlama-style 7B ({llama['parameters'] / 1e9:.2f} B parameters, bf16, AdamW, batch 1 x "
          f"2048) one training step on a simulated H100 80GB: {llama['wall_seconds']:.1f} s of wall "
          f"time for the model, the step and the optimizer, {llama['max_rss_bytes'] / 2**30:.2f} GiB "
          f"of host memory at most, device peak {llama['peak_allocated'] / 2**30:.2f} GiB")


if __name__ == "__main__":
    main()
