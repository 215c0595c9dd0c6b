"""A complete DDP training script for airetrain's script mode, written by `airetrain init --script`.

torchrun starts it on every node (`torchrun --nproc_per_node=N train.py`, which the pipeline runs for you);
airetrain.job gives it the run's seed, its params (a search's trial values), a resume that never silently
starts over, checkpoints made durable on scratch, a stop before the job's time limit, and a metrics line
that `airetrain status`, the report, the results table, a search and the trackers read. Replace the data
and the model with yours; keep the lines marked `job.`.
"""
import argparse
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from airetrain import job


def datasets(root: str | None) -> tuple[TensorDataset, TensorDataset]:
    """(train, validation). Read yours from root, $AIRETRAIN_DATA_DIR (the staged copy of the run's data:).
    Here a synthetic regression, the same on every rank."""
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(2560, 16, generator=g)
    y = torch.tanh(x @ torch.randn(16, 1, generator=g) / 4)
    return TensorDataset(x[:2048], y[:2048]), TensorDataset(x[2048:], y[2048:])


def evaluate(model: nn.Module, loader: DataLoader, device: torch.device) -> float:
    """The mean loss over the validation split, summed over every rank's share of it."""
    model.eval()
    total = torch.zeros(2, device=device)
    with torch.no_grad():
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            total += torch.stack([nn.functional.mse_loss(model(x), y, reduction="sum"), torch.tensor(len(y.view(-1)),
                                                                                                     device=device)])
    dist.all_reduce(total)
    model.train()
    return (total[0] / total[1]).item()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=32, help="per process")
    args = parser.parse_args()
    params = job.params()                      # the run's params: {lr: ...}, a search trial's values
    lr, epochs = float(params.get("lr", 1e-2)), job.max_epochs(args.epochs)   # a search's rung sets its epochs

    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")   # torchrun set the rest
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    torch.manual_seed(job.seed())              # seeds: [0, 1, 2] gives each run its own

    train, validation = datasets(os.environ.get("AIRETRAIN_DATA_DIR"))
    sampler = DistributedSampler(train, shuffle=True, seed=job.seed())
    loader = DataLoader(train, batch_size=args.batch_size, sampler=sampler)
    val_loader = DataLoader(validation, batch_size=256, sampler=DistributedSampler(validation, shuffle=False))
    model = DDP(nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 1)).to(device),
                device_ids=[local_rank] if cuda else None)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)

    epoch, step = 0, 0
    state = job.load_latest()                  # this run's newest checkpoint; None on its first start
    if state:
        model.module.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        epoch, step = state["epoch"], state["step"]
    while epoch < epochs:
        sampler.set_epoch(epoch)               # another order each epoch, the same on a resume
        done_in_epoch = step - epoch * len(loader)   # batches a resumed epoch had trained already
        for i, (x, y) in enumerate(loader):
            if i < done_in_epoch:
                continue
            loss = nn.functional.mse_loss(model(x.to(device)), y.to(device))
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            step += 1
            if step % 10 == 0:
                job.log({"step": step, "epoch": epoch, "loss": loss.item()})
            if job.should_stop():              # the job's time is nearly up, or SIGTERM: save, requeue, resume
                job.save({"model": model.module.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch,
                          "step": step}, step)
                job.stop_and_requeue(step)
        epoch += 1
        job.log({"step": step, "epoch": epoch, "eval_loss": evaluate(model, val_loader, device)})   # epochs trained
        job.save({"model": model.module.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch,
                  "step": step}, step)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
