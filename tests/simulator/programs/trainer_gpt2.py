"""transformers' Trainer training a tiny GPT-2 (4 layers) for 2 steps, for
tests/simulator/test_library_loop.py: the loop is the library's, the user's code one line
(`trainer.train()`), as in most training today. argv: output directory, "bf16" or "fp32",
"checkpointing" or "plain"."""
import sys

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

output, precision, checkpointing = sys.argv[1], sys.argv[2], sys.argv[3] == "checkpointing"


class Tokens(torch.utils.data.Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, index):
        ids = torch.randint(0, 1000, (64,), generator=torch.Generator().manual_seed(index))
        return {"input_ids": ids, "labels": ids}


config = GPT2Config(n_layer=4, n_head=4, n_embd=128, vocab_size=1000, n_positions=64)
model = GPT2LMHeadModel(config)
arguments = TrainingArguments(
    output_dir=output, per_device_train_batch_size=4, max_steps=2, bf16=precision == "bf16",
    gradient_checkpointing=checkpointing, report_to=[], save_strategy="no", logging_strategy="no",
    dataloader_num_workers=0, disable_tqdm=True)
trainer = Trainer(model=model, args=arguments, train_dataset=Tokens())
trainer.train()
print("trained")
