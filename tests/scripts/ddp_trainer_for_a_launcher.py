"""A training script as a user's own launcher starts it (`python -m torch.distributed.launch ... this.py --arg v`):
torch.distributed from the launcher's variables, DDP on gloo, a few optimizer steps of a tiny model, its loss printed.
It takes torch 2's `--local-rank=N` and any other argument, as an argparse script with parse_known_args does."""

import argparse

import torch
import torch.distributed as dist


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--local-rank", "--local_rank", type=int, default=0)
    parser.add_argument("--max_steps", type=int, default=6)
    args, _ = parser.parse_known_args()
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(16, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    data = torch.randn(64, 16, generator=torch.Generator().manual_seed(dist.get_rank()))
    for step in range(args.max_steps):
        loss = (model(data) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if dist.get_rank() == 0:
            print(f"step {step} loss {loss.item():.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
