"""The optimizer and its learning-rate schedule, from the `optim:` config."""
from __future__ import annotations

import math

import torch

from ..run_config import Optim


def fused_default(device_type: str) -> bool | None:
    """optim.fused when the config leaves it null: the fused kernel where it was measured to be faster
    (on CPU: the optimizer's step and the trainer's samples/s, benchmarks/README.md); elsewhere None,
    torch's own choice (foreach on CUDA), until benchmarks/gpu_check.sh has measured it."""
    return True if device_type == "cpu" else None


def make_optimizer(optim: Optim, params, device_type: str = "cpu") -> torch.optim.Optimizer:
    choice = fused_default(device_type) if optim.fused is None else optim.fused
    fused = {} if choice is None else {"fused": choice}
    if optim.name == "sgd":
        return torch.optim.SGD(params, lr=optim.lr, momentum=optim.momentum, weight_decay=optim.weight_decay,
                               **fused)
    return torch.optim.AdamW(params, lr=optim.lr, weight_decay=optim.weight_decay, **fused)


def lr_factor(step: int, warmup: int, total_steps: int, schedule: str) -> float:
    """The learning rate of optimizer step `step` (from 0) as a fraction of optim.lr.

    A linear warm-up over `warmup` steps reaches 1 at step warmup - 1; then the rate stays
    (constant) or falls along a half cosine to 0 at total_steps (cosine)."""
    if step < warmup:
        return (step + 1) / warmup
    if schedule == "cosine":
        return 0.5 * (1 + math.cos(math.pi * min(1.0, (step - warmup) / max(1, total_steps - warmup))))
    return 1.0


def make_scheduler(optim: Optim, optimizer, total_steps: int) -> torch.optim.lr_scheduler.LambdaLR:
    # a plain function: LambdaLR keeps no state of it in the checkpoint, only the step count
    def factor(step: int) -> float:
        return lr_factor(step, optim.warmup_steps, total_steps, optim.schedule)
    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
