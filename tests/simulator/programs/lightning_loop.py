"""Lightning's Trainer training a 3-layer MLP (21 M parameters) for 3 steps on one (simulated)
GPU, for tests/simulator/test_library_loop.py: the loop is Lightning's (`trainer.fit`), the
model's step the user's `training_step`, AdamW from `configure_optimizers`; its optimizer
step runs the forward and backward inside `optimizer.step(closure)`."""
import sys

import lightning
import torch

output = sys.argv[1]


class Batches(torch.utils.data.Dataset):
    def __len__(self):
        return 3 * 64

    def __getitem__(self, index):
        return torch.zeros(1024), torch.zeros((), dtype=torch.long)


class Classifier(lightning.LightningModule):
    def __init__(self):
        super().__init__()
        self.network = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(),
                                           torch.nn.Linear(4096, 4096), torch.nn.ReLU(),
                                           torch.nn.Linear(4096, 10))

    def training_step(self, batch, index):
        x, labels = batch
        return torch.nn.functional.cross_entropy(self.network(x), labels)

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


torch.manual_seed(0)
trainer = lightning.Trainer(accelerator="gpu", devices=1, max_steps=3, logger=False,
                            enable_checkpointing=False, enable_progress_bar=False,
                            enable_model_summary=False, default_root_dir=output)
trainer.fit(Classifier(), torch.utils.data.DataLoader(Batches(), batch_size=64))
print("trained")
