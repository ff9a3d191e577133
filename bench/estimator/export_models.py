"""Writes the models memtrace-estimate-bench times, into the directory given:
ResNet-50 (torchvision's layout: bottlenecks 3-4-6-3, width 64, 1000 classes, 25.6 M parameters)
and GPT-2 small (12 layers, 768 wide, 12 heads, 50257-token vocabulary, 1024 context,
124 M parameters), each scripted and traced; GPT-2 medium (24 layers, 1024 wide, 16 heads,
355 M parameters), traced; and a Llama-size model from a real Llama config (TinyLlama-1.1B's:
22 layers, 2048 wide, 32 heads, 4 key-value heads, 5632 MLP, 32000-token vocabulary,
1.1 B parameters, bfloat16), Hugging Face transformers' LlamaForCausalLM traced as
mem_tracer.estimate traces it. Random weights throughout.

    python3 bench/estimator/export_models.py DIR
"""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "estimator"))
import models


def main(directory):
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    resnet = models.ResNetLike(layers=(3, 4, 6, 3), width=64, classes=1000).eval()
    gpt2 = models.GPT2Like(vocabulary=50257, embedding=768, heads=12, layers=12, context=1024).eval()
    for name, model, example in [
        ("resnet50", resnet, torch.randn(1, 3, 224, 224)),
        ("gpt2", gpt2, torch.randint(0, 50257, (1, 1024))),
    ]:
        torch.jit.script(model).save(str(directory / f"{name}_scripted.pt"))
        with torch.no_grad():
            torch.jit.trace(model, example, check_trace=False).save(str(directory / f"{name}_traced.pt"))
        print(f"{name}: {sum(p.numel() for p in model.parameters())} parameters")
    medium = models.GPT2Like(vocabulary=50257, embedding=1024, heads=16, layers=24,
                             context=1024).eval()
    with torch.no_grad():
        torch.jit.trace(medium, torch.randint(0, 50257, (1, 1024)), check_trace=False).save(
            str(directory / "gpt2_medium_traced.pt"))
    print(f"gpt2_medium: {sum(p.numel() for p in medium.parameters())} parameters")
    del medium
    llama = tiny_llama()
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))
    from mem_tracer.estimator.estimate import trace_model
    traced, _, _ = trace_model(llama, (torch.randint(0, 32000, (1, 1024)),), {})
    traced.save(str(directory / "llama_1b_traced.pt"))
    print(f"llama_1b: {sum(p.numel() for p in llama.parameters())} parameters")


def tiny_llama():
    import transformers

    config = transformers.LlamaConfig(
        vocab_size=32000, hidden_size=2048, intermediate_size=5632, num_hidden_layers=22,
        num_attention_heads=32, num_key_value_heads=4, max_position_embeddings=2048,
        rms_norm_eps=1e-5, use_cache=False, torch_dtype="bfloat16")
    torch.set_default_dtype(torch.bfloat16)
    try:
        model = transformers.LlamaForCausalLM._from_config(config, attn_implementation="sdpa")
    finally:
        torch.set_default_dtype(torch.float32)
    return model.eval()


if __name__ == "__main__":
    main(sys.argv[1])
