"""accelerate's loop over DDP, one rank of a torchrun job, for tests/simulator/test_library_loop.py:
`Accelerator()` finds torchrun's ranks and wraps the model in DistributedDataParallel over NCCL
(simulated: Note [Collectives] in simulator/libraries/nccl.cpp); the loop is the one
accelerate's documentation writes (`accelerator.backward(loss)`), 3 steps of AdamW on a 3-layer
MLP (21 M parameters), batch 64 a rank.

    torchrun --nproc-per-node 2 accelerate_ddp.py"""
import torch
from accelerate import Accelerator


class Batches(torch.utils.data.Dataset):
    def __len__(self):
        return 6 * 64

    def __getitem__(self, index):
        return torch.zeros(1024), torch.zeros((), dtype=torch.long)


accelerator = Accelerator()
torch.manual_seed(0)
network = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(),
                              torch.nn.Linear(4096, 4096), torch.nn.ReLU(),
                              torch.nn.Linear(4096, 10))
optimizer = torch.optim.AdamW(network.parameters(), lr=1e-3)
loader = torch.utils.data.DataLoader(Batches(), batch_size=64)
network, optimizer, loader = accelerator.prepare(network, optimizer, loader)
assert isinstance(network, torch.nn.parallel.DistributedDataParallel), type(network)
for step, (x, labels) in enumerate(loader):
    loss = torch.nn.functional.cross_entropy(network(x), labels)
    accelerator.backward(loss)
    optimizer.step()
    optimizer.zero_grad()
    if step == 2:
        break
print(f"trained rank {accelerator.process_index} of {accelerator.num_processes}")
