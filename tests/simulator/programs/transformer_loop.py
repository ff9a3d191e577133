"""A transformer's training loop written in a function: transformers' GPT-2 (a small config,
random weights), AdamW, bf16 autocast, the batch and the outputs in the function's locals
(tests/simulator/test_unchanged.py)."""
import torch
from transformers import GPT2Config, GPT2LMHeadModel


def train(model, optimizer, batches):
    model.train()
    for ids in batches:
        ids = ids.cuda()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            outputs = model(input_ids=ids, labels=ids)
        outputs.loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)


def main():
    torch.manual_seed(0)
    config = GPT2Config(n_layer=2, n_head=4, n_embd=128, vocab_size=1000, n_positions=128)
    model = GPT2LMHeadModel(config).cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    batches = [torch.randint(0, 1000, (4, 128)) for _ in range(3)]
    train(model, optimizer, batches)


if __name__ == "__main__":
    main()
